//! The workloads of `tensorguard bench compare`: what each one is (the spec
//! sent to the peers as `setup <name> <kind> <args...>`), the work it does
//! for the "fraction of limit" column, and tensorguard's side of it. The
//! timing schedule (`measure`) is the one the candle and PyTorch peers use.

use std::time::Instant;

use tensorguard::{autograd, device, manual_seed, DType, Device, Tensor};

/// Which measured limit a workload is held against.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// Memory traffic: bytes read plus bytes written, against the memcpy
    /// bandwidth (all threads from 1 MiB of traffic, one thread below).
    Memory(f64),
    /// Floating-point operations, against the peak of `gemm` called directly.
    Flops(f64),
    /// No hardware limit applies (allocation, per-op overhead).
    None,
}

/// One workload, as every framework runs it.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The name in the table and the JSON (`add_16M_t`).
    pub name: String,
    /// The kind the peers dispatch on (`ew`, `sum`, `matmul`, ...).
    pub kind: &'static str,
    /// The kind's arguments.
    pub args: Vec<String>,
    /// The work done, for the limit column.
    pub limit: Limit,
}

impl Spec {
    fn new(name: String, kind: &'static str, args: &[&dyn ToString], limit: Limit) -> Spec {
        Spec {
            name,
            kind,
            args: args.iter().map(|a| a.to_string()).collect(),
            limit,
        }
    }

    /// The `setup` line of the peer protocol.
    pub fn setup_line(&self) -> String {
        format!("setup {} {} {}", self.name, self.kind, self.args.join(" "))
    }
}

const F32: f64 = 4.0;
/// The MLP of `benches/autograd.rs`: 784-256-256-10.
const MLP: [usize; 4] = [784, 256, 256, 10];

fn size_name(n: usize) -> String {
    match n {
        n if n >= 1 << 20 => format!("{}M", n >> 20),
        n if n >= 1 << 10 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

/// Every workload of the issue, in table order.
pub fn all() -> Vec<Spec> {
    let mut v = Vec::new();
    for op in ["add", "mul", "exp"] {
        let operands = if op == "exp" { 2.0 } else { 3.0 };
        for n in [1usize << 10, 1 << 16, 1 << 24] {
            for layout in ["c", "t"] {
                let suffix = if layout == "t" { "_t" } else { "" };
                v.push(Spec::new(
                    format!("{op}_{}{suffix}", size_name(n)),
                    "ew",
                    &[&op, &n, &layout],
                    Limit::Memory(operands * n as f64 * F32),
                ));
            }
        }
    }
    let n = 1usize << 24;
    v.push(Spec::new(
        "sum_16M".into(),
        "sum",
        &[&n, &"all"],
        Limit::Memory(n as f64 * F32),
    ));
    v.push(Spec::new(
        "sum_last_16M".into(),
        "sum",
        &[&n, &"last"],
        Limit::Memory(n as f64 * F32),
    ));
    // across rows: a bias gradient, a batch norm's statistics
    v.push(Spec::new(
        "sum_first_16M".into(),
        "sum",
        &[&n, &"first"],
        Limit::Memory(n as f64 * F32),
    ));
    v.push(Spec::new(
        "softmax_4096x4096".into(),
        "softmax",
        &[&4096, &4096],
        Limit::Memory(2.0 * n as f64 * F32),
    ));
    for m in [64usize, 256, 1024, 2048] {
        v.push(Spec::new(
            format!("matmul_{m}"),
            "matmul",
            &[&0, &m, &m, &m],
            Limit::Flops(2.0 * (m as f64).powi(3)),
        ));
    }
    v.push(Spec::new(
        "bmm_32x128x128".into(),
        "matmul",
        &[&32, &128, &128, &128],
        Limit::Flops(32.0 * 2.0 * 128f64.powi(3)),
    ));
    v.push(Spec::new(
        "chain100_add".into(),
        "chain",
        &[&100, &0],
        Limit::None,
    ));
    v.push(Spec::new(
        "chain100_add_autograd".into(),
        "chain",
        &[&100, &1],
        Limit::None,
    ));
    for b in [64usize, 256] {
        // forward 2*b*k*n per layer, backward twice that (input and weight grads)
        let flops: f64 = MLP.windows(2).map(|w| 6.0 * (b * w[0] * w[1]) as f64).sum();
        v.push(Spec::new(
            format!("mlp_sgd_b{b}"),
            "mlp",
            &[&b],
            Limit::Flops(flops),
        ));
    }
    for how in ["clone", "contiguous"] {
        v.push(Spec::new(
            format!("{how}_t_4096x4096"),
            "copy_t",
            &[&4096, &how],
            Limit::Memory(2.0 * n as f64 * F32),
        ));
    }
    v.push(Spec::new(
        "empty_1KiB".into(),
        "empty",
        &[&1024],
        Limit::None,
    ));
    v.push(Spec::new(
        "empty_1GiB".into(),
        "empty",
        &[&(1usize << 30)],
        Limit::None,
    ));
    for (label, bytes) in [("1KiB", 1usize << 10), ("64MiB", 64 << 20)] {
        v.push(Spec::new(
            format!("to_emu_{label}"),
            "to",
            &[&bytes],
            Limit::Memory(2.0 * bytes as f64),
        ));
    }
    v
}

/// The workloads whose name contains one of the comma-separated words of
/// `only` (all of them without `--only`).
pub fn select(only: Option<&str>) -> Result<Vec<Spec>, String> {
    let all = all();
    let Some(only) = only else {
        return Ok(all);
    };
    let words: Vec<&str> = only
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    let picked: Vec<Spec> = all
        .iter()
        .filter(|s| words.iter().any(|w| s.name.contains(w)))
        .cloned()
        .collect();
    if picked.is_empty() {
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        return Err(format!(
            "bench compare: no workload matches `--only {only}`. The workloads are: {}.",
            names.join(", ")
        ));
    }
    Ok(picked)
}

/// One prepared tensorguard workload: does the work once, dropping what it made.
pub type Work = Box<dyn FnMut() -> tensorguard::Result<()>>;

/// The median seconds per call of `f`, the repetitions timed and the calls
/// per repetition. Warm-up: a quarter of `budget` (at least one call); then
/// repetitions of enough calls for 100 µs each until `budget` is spent, at
/// least `min_reps` and at most `max_reps`. The peers use the same schedule.
pub fn measure(
    f: &mut dyn FnMut() -> tensorguard::Result<()>,
    budget: f64,
    min_reps: usize,
    max_reps: usize,
) -> tensorguard::Result<(f64, usize, usize)> {
    let start = Instant::now();
    let mut calls = 0usize;
    loop {
        f()?;
        calls += 1;
        if start.elapsed().as_secs_f64() >= budget / 4.0 || calls >= 10_000 {
            break;
        }
    }
    let est = start.elapsed().as_secs_f64() / calls as f64;
    let inner = ((1e-4 / est.max(1e-9)).ceil() as usize).clamp(1, 10_000);
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < max_reps
        && (times.len() < min_reps || start.elapsed().as_secs_f64() < budget)
    {
        let t = Instant::now();
        for _ in 0..inner {
            f()?;
        }
        times.push(t.elapsed().as_secs_f64() / inner as f64);
    }
    let reps = times.len();
    Ok((median(&mut times), reps, inner))
}

/// The median of `v` (NaN when empty); sorts `v`.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn arg(spec: &Spec, i: usize) -> Result<usize, String> {
    spec.args
        .get(i)
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| {
            format!(
                "bench compare: internal error: argument {i} of workload {} is not a count.",
                spec.name
            )
        })
}

fn side(n: usize) -> usize {
    (n as f64).sqrt().round() as usize
}

/// tensorguard's side of `spec`: its inputs, made now, and the call to time.
pub fn setup(spec: &Spec) -> Result<Work, String> {
    make(spec).map_err(|e| format!("bench compare: setting up {} failed: {e}", spec.name))
}

fn make(spec: &Spec) -> Result<Work, String> {
    let cpu = Device::Cpu;
    let e = |x: tensorguard::Error| x.to_string();
    let randn = |shape: &[usize]| Tensor::randn(shape.to_vec(), DType::F32, &cpu).map_err(e);
    manual_seed(0);
    match spec.kind {
        "ew" => {
            let n = arg(spec, 1)?;
            let (a, b) = if spec.args.get(2).map(String::as_str) == Some("t") {
                let s = side(n);
                (
                    randn(&[s, s])?.t().map_err(e)?,
                    randn(&[s, s])?.t().map_err(e)?,
                )
            } else {
                (randn(&[n])?, randn(&[n])?)
            };
            match spec.args[0].as_str() {
                "add" => Ok(Box::new(move || a.add(&b).map(drop))),
                "mul" => Ok(Box::new(move || a.mul(&b).map(drop))),
                _ => Ok(Box::new(move || a.exp().map(drop))),
            }
        }
        "sum" => {
            let s = side(arg(spec, 0)?);
            let x = randn(&[s, s])?;
            match spec.args.get(1).map(String::as_str) {
                Some("last") => Ok(Box::new(move || x.sum_dim(-1isize, false).map(drop))),
                Some("first") => Ok(Box::new(move || x.sum_dim(0isize, false).map(drop))),
                _ => Ok(Box::new(move || x.sum().map(drop))),
            }
        }
        "softmax" => {
            let x = randn(&[arg(spec, 0)?, arg(spec, 1)?])?;
            Ok(Box::new(move || x.softmax(-1).map(drop)))
        }
        "matmul" => {
            let (b, m, k, n) = (arg(spec, 0)?, arg(spec, 1)?, arg(spec, 2)?, arg(spec, 3)?);
            let (x, y) = if b == 0 {
                (randn(&[m, k])?, randn(&[k, n])?)
            } else {
                (randn(&[b, m, k])?, randn(&[b, k, n])?)
            };
            Ok(Box::new(move || x.matmul(&y).map(drop)))
        }
        "chain" => {
            let len = arg(spec, 0)?;
            let grad = arg(spec, 1)? == 1;
            let one = Tensor::ones([1], DType::F32, &cpu).map_err(e)?;
            let a = Tensor::ones([1], DType::F32, &cpu).map_err(e)?;
            let a = if grad {
                a.requires_grad(true).map_err(e)?
            } else {
                a
            };
            Ok(Box::new(move || {
                let mut x = a.alias();
                for _ in 0..len {
                    x = x.add(&one)?;
                }
                drop(x);
                Ok(())
            }))
        }
        "mlp" => mlp(arg(spec, 0)?).map_err(e),
        "copy_t" => {
            let s = arg(spec, 0)?;
            let x = randn(&[s, s])?.t().map_err(e)?;
            if spec.args.get(1).map(String::as_str) == Some("contiguous") {
                Ok(Box::new(move || x.contiguous().map(drop)))
            } else {
                Ok(Box::new(move || x.clone().map(drop)))
            }
        }
        "empty" => {
            let n = arg(spec, 0)? / 4;
            Ok(Box::new(move || {
                Tensor::empty([n], DType::F32, &Device::Cpu).map(drop)
            }))
        }
        "to" => {
            let n = arg(spec, 0)? / 4;
            let emu = Device::Emulated(0);
            let src = Tensor::ones([n], DType::F32, &cpu).map_err(e)?;
            Ok(Box::new(move || {
                let out = src.to(&emu)?;
                device::synchronize(&emu)?;
                drop(out);
                Ok(())
            }))
        }
        other => Err(format!("internal error: unknown workload kind `{other}`")),
    }
}

/// The raw-tensor SGD step of `benches/autograd.rs` (group `autograd_mlp`):
/// zero_grad, forward, `-log_softmax(logits).gather(1, targets).mean()`,
/// backward, then `p -= 0.01 * grad` under `no_grad`.
fn mlp(batch: usize) -> tensorguard::Result<Work> {
    let dev = Device::Cpu;
    let mut params = Vec::new();
    for w in MLP.windows(2) {
        let (fan_in, fan_out) = (w[0], w[1]);
        let scale = (2.0 / fan_in as f64).sqrt();
        let weight = Tensor::randn([fan_in, fan_out], DType::F32, &dev)?.mul(scale)?;
        params.push(weight.requires_grad(true)?);
        params.push(Tensor::zeros([fan_out], DType::F32, &dev)?.requires_grad(true)?);
    }
    let x = Tensor::randn([batch, MLP[0]], DType::F32, &dev)?;
    let targets: Vec<i64> = (0..batch as i64).map(|i| (i * 7 + 3) % 10).collect();
    let targets = Tensor::from_vec(targets, [batch, 1], &dev)?;
    Ok(Box::new(move || {
        for p in &params {
            p.zero_grad();
        }
        let mut h = x.alias();
        let layers = params.len() / 2;
        for (i, wb) in params.chunks(2).enumerate() {
            h = h.matmul(&wb[0])?.add(&wb[1])?;
            if i + 1 < layers {
                h = h.relu()?;
            }
        }
        let loss = h.log_softmax(-1)?.gather(1, &targets)?.neg()?.mean()?;
        loss.backward()?;
        autograd::no_grad(|| -> tensorguard::Result<()> {
            for p in &params {
                if let Some(g) = p.grad() {
                    p.sub_(&g.mul(0.01)?)?;
                }
            }
            Ok(())
        })?;
        loss.item::<f32>().map(drop)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_of_the_issue_is_listed_once() {
        let all = all();
        let mut names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        // the issue's 36 and `sum_first_16M`
        assert_eq!(names.len(), 37);
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 37, "workload names repeat");
        assert!(names.contains(&"add_16M_t") && names.contains(&"to_emu_64MiB"));
        assert_eq!(
            all[0].setup_line(),
            "setup add_1K ew add 1024 c",
            "the peers parse this line"
        );
    }

    #[test]
    fn only_picks_by_substring_and_explains_a_miss() {
        let picked = select(Some("matmul_1024,bmm")).unwrap();
        let names: Vec<&str> = picked.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["matmul_1024", "bmm_32x128x128"]);
        let e = select(Some("nothing")).unwrap_err();
        assert!(
            e.contains("no workload matches") && e.contains("add_1K"),
            "{e}"
        );
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
