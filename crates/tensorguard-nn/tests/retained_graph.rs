//! PyTorch's FAQ pitfall, "don't accumulate history across your training
//! loop", with this crate's optimizers: `total = total + loss` keeps every
//! step's graph alive, and autograd warns once, naming the line; keeping a
//! number (`loss.item()`) stays quiet and flat.

use std::sync::Mutex;

use tensorguard_nn::optim::{Adam, AdamConfig, Optimizer};
use tensorguard_nn::tensorguard::autograd::graph_stats;
use tensorguard_nn::tensorguard::warnings::{self, WarningMode};
use tensorguard_nn::tensorguard::{manual_seed, DType, Device, Result, Tensor};
use tensorguard_nn::{Linear, Module};

static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target().starts_with("tensorguard")
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            SEEN.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

/// One test in this binary: the counters and the warnings are per process.
#[test]
fn accumulating_the_loss_as_a_tensor_warns_once_and_item_does_not() -> Result<()> {
    log::set_logger(&Capture).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Warn);
    warnings::set_mode(WarningMode::Log);
    manual_seed(1);
    let dev = Device::Cpu;
    let model = Linear::new(8, 2, true, &dev)?;
    let mut opt = Adam::new(model.named_parameters(), AdamConfig::adam(1e-2))?;
    let x = Tensor::randn([16, 8], DType::F32, &dev)?;
    let loss = |m: &Linear| m.forward(&x)?.pow(2.0)?.mean();

    // the good loop: a number
    let mut total = 0.0f32;
    let before = graph_stats();
    for _ in 0..6 {
        opt.zero_grad(true)?;
        let l = loss(&model)?;
        l.backward()?;
        opt.step()?;
        total += l.item::<f32>()?;
    }
    assert!(total > 0.0);
    assert_eq!(
        graph_stats().nodes_from_earlier_steps,
        before.nodes_from_earlier_steps
    );
    assert!(
        SEEN.lock().unwrap().is_empty(),
        "{:?}",
        SEEN.lock().unwrap()
    );

    // the pitfall: a tensor that keeps every step's graph
    let mut acc = Tensor::zeros((), DType::F32, &dev)?;
    let line = line!() + 6;
    for _ in 0..6 {
        opt.zero_grad(true)?;
        let l = loss(&model)?;
        l.backward()?;
        opt.step()?;
        acc = acc.add(&l)?;
    }
    assert!(graph_stats().nodes_from_earlier_steps > before.nodes_from_earlier_steps);
    let seen = SEEN.lock().unwrap().clone();
    let site = format!("retained_graph.rs:{line}:");
    let hits: Vec<&String> = seen.iter().filter(|w| w.contains(&site)).collect();
    assert_eq!(hits.len(), 1, "one warning naming line {line}: {seen:?}");
    assert!(
        hits[0].contains(".item()") || hits[0].contains("detach"),
        "{}",
        hits[0]
    );
    drop(acc);
    Ok(())
}
