//! candle's side of the training-step benchmark: the 784-256-256-10 MLP
//! (Linear+ReLU, Linear+ReLU, Linear), cross-entropy on class indices,
//! backward, Adam (lr 1e-3: candle's AdamW with weight decay 0, which is
//! Adam) step, f32 on the cpu, fixed random inputs. candle's
//! `backward_step` makes fresh gradients each step and keeps none, which is
//! `zero_grad(set_to_none=True)`.
//!
//! `candle-train-bench [--batches 64,256] [--warmup 20] [--steps 200]`
//! prints one JSON object per batch size, like the tensorguard bench.

use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{linear, loss, AdamW, Linear, Module, Optimizer, ParamsAdamW, VarBuilder, VarMap};

struct Mlp {
    l1: Linear,
    l2: Linear,
    l3: Linear,
}

impl Mlp {
    fn new(vb: VarBuilder) -> Result<Mlp> {
        Ok(Mlp {
            l1: linear(784, 256, vb.pp("l1"))?,
            l2: linear(256, 256, vb.pp("l2"))?,
            l3: linear(256, 10, vb.pp("l3"))?,
        })
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.l1.forward(x)?.relu()?;
        let h = self.l2.forward(&h)?.relu()?;
        self.l3.forward(&h)
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> Result<()> {
    let mut batches = vec![64usize, 256];
    let mut warmup = 20usize;
    let mut steps = 200usize;
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        match k.as_str() {
            "--batches" => {
                batches = it
                    .next()
                    .expect("--batches N,M")
                    .split(',')
                    .map(|s| s.parse().expect("a batch size"))
                    .collect()
            }
            "--warmup" => warmup = it.next().expect("--warmup N").parse().expect("a count"),
            "--steps" => steps = it.next().expect("--steps N").parse().expect("a count"),
            _ => {}
        }
    }
    let dev = Device::Cpu;
    for &batch in &batches {
        // candle cannot seed its cpu rng (`set_seed` errors there); the inputs are random per run
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
        let model = Mlp::new(vb)?;
        let params = ParamsAdamW {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        let mut opt = AdamW::new(varmap.all_vars(), params)?;
        let x = Tensor::randn(0f32, 1f32, (batch, 784), &dev)?;
        let y: Vec<u32> = (0..batch as u32).map(|i| (i * 7 + 3) % 10).collect();
        let y = Tensor::from_vec(y, batch, &dev)?;
        let one = |opt: &mut AdamW| -> Result<()> {
            let logits = model.forward(&x)?;
            let l = loss::cross_entropy(&logits, &y)?;
            opt.backward_step(&l)
        };
        for _ in 0..warmup {
            one(&mut opt)?;
        }
        let mut times = Vec::with_capacity(steps);
        for _ in 0..steps {
            let t = Instant::now();
            one(&mut opt)?;
            times.push(t.elapsed().as_secs_f64());
        }
        let med = median(&mut times);
        println!(
            "{{\"framework\":\"candle\",\"workload\":\"mlp_step_b{batch}\",\"batch\":{batch},\"median_s\":{med:.9},\"steps\":{steps}}}"
        );
    }
    Ok(())
}
