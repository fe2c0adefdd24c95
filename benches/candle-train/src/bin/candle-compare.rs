//! candle's side of `tensorguard bench compare`: a peer process that speaks
//! the comparison's line protocol on stdin/stdout (see
//! `crates/tensorguard-cli/src/bench/compare_peers.rs`):
//!
//! - at start it prints `ready {json}` (candle's version, threads);
//! - `setup <name> <kind> <args...>` makes the inputs of a workload and
//!   answers `ok`, or `skip <reason>` when candle has no equivalent;
//! - `run <name> <budget_s> <min_reps> <max_reps>` warms up, times the
//!   workload and answers `ok <median_s> <reps> <inner>`;
//! - `free` drops every input (`ok`), `quit` exits.
//!
//! Errors are answered as `error <message>` on the same line; the process
//! only exits on `quit` or at the end of its input.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor, Var, D};

/// One prepared workload: a call that does the work once and returns what
/// it made (dropped by the caller, as each framework frees its results).
type Work = Box<dyn FnMut() -> Result<Vec<Tensor>>>;

/// The side of a square matrix of `n` elements (`n` is a power of 4).
fn side(n: usize) -> usize {
    (n as f64).sqrt().round() as usize
}

fn num(args: &[&str], i: usize) -> std::result::Result<usize, String> {
    args.get(i)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("argument {i} of `{}` is not a count", args.join(" ")))
}

/// The 784-256-256-10 MLP of the raw-tensor SGD step.
fn mlp(batch: usize, dev: &Device) -> Result<Work> {
    let sizes = [784usize, 256, 256, 10];
    let mut params = Vec::new();
    for w in sizes.windows(2) {
        let scale = (2.0 / w[0] as f64).sqrt();
        let weight = (Tensor::randn(0f32, 1f32, (w[0], w[1]), dev)? * scale)?;
        params.push(Var::from_tensor(&weight)?);
        params.push(Var::zeros(w[1], DType::F32, dev)?);
    }
    let x = Tensor::randn(0f32, 1f32, (batch, 784), dev)?;
    let t: Vec<u32> = (0..batch as u32).map(|i| (i * 7 + 3) % 10).collect();
    let t = Tensor::from_vec(t, (batch, 1), dev)?;
    let lr = 0.01;
    Ok(Box::new(move || {
        let mut h = x.clone();
        let layers = params.len() / 2;
        for (i, wb) in params.chunks(2).enumerate() {
            h = h
                .matmul(wb[0].as_tensor())?
                .broadcast_add(wb[1].as_tensor())?;
            if i + 1 < layers {
                h = h.relu()?;
            }
        }
        let loss = candle_nn::ops::log_softmax(&h, D::Minus1)?
            .gather(&t, 1)?
            .neg()?
            .mean_all()?;
        // candle's backward makes fresh gradients each step (set_to_none)
        let grads = loss.backward()?;
        for p in &params {
            if let Some(g) = grads.get(p.as_tensor()) {
                p.set(&(p.as_tensor() - (g * lr)?)?)?;
            }
        }
        let _ = loss.to_scalar::<f32>()?;
        Ok(vec![])
    }))
}

/// The inputs of one workload, and the call that runs it.
fn setup(kind: &str, args: &[&str], dev: &Device) -> std::result::Result<Work, String> {
    let e = |x: candle_core::Error| x.to_string();
    let randn = |shape: (usize, usize)| Tensor::randn(0f32, 1f32, shape, dev).map_err(e);
    match kind {
        "ew" => {
            let op = args.first().copied().unwrap_or("");
            let n = num(args, 1)?;
            let transposed = args.get(2) == Some(&"t");
            let s = side(n);
            let (mut a, mut b) = if transposed {
                (randn((s, s))?, randn((s, s))?)
            } else {
                (
                    randn((1, n))?.flatten_all().map_err(e)?,
                    randn((1, n))?.flatten_all().map_err(e)?,
                )
            };
            if transposed {
                a = a.t().map_err(e)?;
                b = b.t().map_err(e)?;
            }
            match op {
                "add" => Ok(Box::new(move || Ok(vec![(&a + &b)?]))),
                "mul" => Ok(Box::new(move || Ok(vec![(&a * &b)?]))),
                "exp" => Ok(Box::new(move || Ok(vec![a.exp()?]))),
                _ => Err(format!("unknown elementwise op `{op}`")),
            }
        }
        "sum" => {
            let n = num(args, 0)?;
            let s = side(n);
            let x = randn((s, s))?;
            match args.get(1) {
                Some(&"last") => Ok(Box::new(move || Ok(vec![x.sum(D::Minus1)?]))),
                Some(&"first") => Ok(Box::new(move || Ok(vec![x.sum(0usize)?]))),
                _ => Ok(Box::new(move || Ok(vec![x.sum_all()?]))),
            }
        }
        "softmax" => {
            let x = randn((num(args, 0)?, num(args, 1)?))?;
            Ok(Box::new(move || {
                Ok(vec![candle_nn::ops::softmax_last_dim(&x)?])
            }))
        }
        "matmul" => {
            let (b, m, k, n) = (num(args, 0)?, num(args, 1)?, num(args, 2)?, num(args, 3)?);
            let (x, y) = if b == 0 {
                (randn((m, k))?, randn((k, n))?)
            } else {
                (
                    randn((b * m, k))?.reshape((b, m, k)).map_err(e)?,
                    randn((b * k, n))?.reshape((b, k, n)).map_err(e)?,
                )
            };
            Ok(Box::new(move || Ok(vec![x.matmul(&y)?])))
        }
        "chain" => {
            let len = num(args, 0)?;
            let grad = args.get(1) == Some(&"1");
            let b = Tensor::ones(1, DType::F32, dev).map_err(e)?;
            let a = Var::ones(1, DType::F32, dev).map_err(e)?;
            let plain = Tensor::ones(1, DType::F32, dev).map_err(e)?;
            Ok(Box::new(move || {
                let mut x = if grad {
                    a.as_tensor().clone()
                } else {
                    plain.clone()
                };
                for _ in 0..len {
                    x = (&x + &b)?;
                }
                Ok(vec![x])
            }))
        }
        "mlp" => mlp(num(args, 0)?, dev).map_err(e),
        "copy_t" => {
            let s = num(args, 0)?;
            let x = randn((s, s))?.t().map_err(e)?;
            if args.get(1) == Some(&"contiguous") {
                Ok(Box::new(move || Ok(vec![x.contiguous()?])))
            } else {
                // candle's copy keeps the layout, as PyTorch's clone
                Ok(Box::new(move || Ok(vec![x.copy()?])))
            }
        }
        "empty" => {
            let n = num(args, 0)? / 4;
            let dev = dev.clone();
            // SAFETY: the tensor is never read; this times the allocation alone.
            Ok(Box::new(move || {
                Ok(vec![unsafe { Tensor::empty(n, DType::F32, &dev)? }])
            }))
        }
        "to" => Err(
            "skip candle has no second device here (emu:N is tensorguard's emulated device)".into(),
        ),
        _ => Err(format!("unknown workload kind `{kind}`")),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Warm up for a quarter of the budget (at least one call), then time
/// repetitions of `inner` calls (enough for 100 µs) until the budget is spent,
/// with at least `min_reps` and at most `max_reps`: the same schedule as the
/// tensorguard and PyTorch sides.
fn measure(
    f: &mut Work,
    budget: f64,
    min_reps: usize,
    max_reps: usize,
) -> Result<(f64, usize, usize)> {
    let start = Instant::now();
    let mut calls = 0usize;
    loop {
        drop(f()?);
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
            drop(f()?);
        }
        times.push(t.elapsed().as_secs_f64() / inner as f64);
    }
    let reps = times.len();
    Ok((median(&mut times), reps, inner))
}

fn main() {
    let dev = Device::Cpu;
    let mut work: HashMap<String, Work> = HashMap::new();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let threads = candle_core::utils::get_num_threads();
    let _ = writeln!(
        out,
        "ready {{\"framework\":\"candle\",\"version\":\"0.11.1\",\"threads\":{threads}}}"
    );
    let _ = out.flush();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["quit"] => break,
            ["free"] => {
                work.clear();
                "ok".to_string()
            }
            ["setup", name, kind, args @ ..] => match setup(kind, args, &dev) {
                Ok(w) => {
                    work.insert(name.to_string(), w);
                    "ok".to_string()
                }
                Err(m) if m.starts_with("skip ") => m,
                Err(m) => format!("error {m}"),
            },
            ["run", name, budget, min_reps, max_reps] => {
                let parsed = (
                    budget.parse::<f64>(),
                    min_reps.parse::<usize>(),
                    max_reps.parse::<usize>(),
                );
                match (work.get_mut(*name), parsed) {
                    (Some(w), (Ok(b), Ok(lo), Ok(hi))) => match measure(w, b, lo, hi) {
                        Ok((med, reps, inner)) => format!("ok {med:.12e} {reps} {inner}"),
                        Err(e) => format!("error {e}"),
                    },
                    (None, _) => format!("error `{name}` was not set up"),
                    _ => format!(
                        "error `{line}` is not `run <name> <budget_s> <min_reps> <max_reps>`"
                    ),
                }
            }
            _ => format!("error unknown command `{line}`"),
        };
        let _ = writeln!(out, "{}", reply.replace('\n', " "));
        let _ = out.flush();
    }
}
