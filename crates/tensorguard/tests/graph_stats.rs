//! Graph stats and the warning for history accumulated across optimizer
//! steps (PyTorch's FAQ: `total_loss += loss`). The counters are
//! process-wide, so every test of this binary holds one lock.

mod common;

use std::sync::{Mutex, MutexGuard};

use tensorguard::autograd::{self, GraphStats};
use tensorguard::warnings::{self, WarningMode};
use tensorguard::{DType, Device, Generator, Result, Tensor};

const CPU: Device = Device::Cpu;

fn lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    common::log_capture::install();
    warnings::set_mode(WarningMode::Auto);
    g
}

struct Model {
    w: Tensor,
    x: Tensor,
}

impl Model {
    fn new(seed: u64) -> Model {
        let g = Generator::new(seed);
        Model {
            w: Tensor::rand_with([8, 4], DType::F32, &CPU, &g)
                .unwrap()
                .requires_grad(true)
                .unwrap(),
            x: Tensor::rand_with([16, 8], DType::F32, &CPU, &g).unwrap(),
        }
    }
    fn loss(&self) -> Result<Tensor> {
        self.x.matmul(&self.w)?.tanh()?.pow(2.0)?.mean()
    }
    /// SGD's step, then the optimizer marks it.
    fn step(&self) -> Result<()> {
        let g = self.w.grad().expect("backward ran");
        autograd::no_grad(|| self.w.sub_(&g.mul(0.1)?).map(|_| ()))?;
        self.w.zero_grad();
        autograd::mark_step();
        Ok(())
    }
}

fn autograd_warnings(line: u32) -> Vec<String> {
    common::log_capture::of_target("tensorguard::autograd", &format!("graph_stats.rs:{line}:"))
}

#[track_caller]
fn assert_growing(stats: &[GraphStats]) {
    for w in stats.windows(2) {
        assert!(
            w[1].live_nodes > w[0].live_nodes
                && w[1].nodes_from_earlier_steps > w[0].nodes_from_earlier_steps,
            "the graph should grow every step: {stats:#?}"
        );
    }
}

#[test]
fn accumulating_the_loss_after_backward_warns_once() -> Result<()> {
    let _g = lock();
    let m = Model::new(1);
    let mut total = Tensor::zeros([], DType::F32, &CPU)?;
    let mut stats = Vec::new();
    let add_line = line!() + 6;
    for _ in 0..6 {
        let loss = m.loss()?;
        loss.backward()?;
        m.step()?;
        // the FAQ's bug: the history of every step stays alive
        total = total.add(&loss)?;
        stats.push(autograd::graph_stats());
    }
    assert_growing(&stats);
    let w = autograd_warnings(add_line);
    assert_eq!(w.len(), 1, "one warning for the site: {w:#?}");
    let msg = &w[0];
    for needle in [
        "`add`",
        "earlier optimizer steps",
        "live graph nodes",
        ".item()",
        ".detach()",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    assert!(
        msg.contains(&format!("{} live graph nodes", stats[2].live_nodes)),
        "{msg}\n{stats:#?}"
    );
    drop(total);
    Ok(())
}

#[test]
fn accumulating_the_loss_before_backward_warns_once() -> Result<()> {
    let _g = lock();
    let m = Model::new(2);
    let mut total = Tensor::zeros([], DType::F32, &CPU)?;
    let mut stats = Vec::new();
    let add_line = line!() + 3;
    for _ in 0..6 {
        let loss = m.loss()?;
        total = total.add(&loss)?;
        loss.backward()?;
        m.step()?;
        stats.push(autograd::graph_stats());
    }
    assert_growing(&stats);
    assert_eq!(autograd_warnings(add_line).len(), 1);
    // the total itself is still differentiable, as in PyTorch
    drop(total);
    let after = autograd::graph_stats();
    assert!(
        after.live_nodes < stats[0].live_nodes,
        "{after:?} vs {stats:?}"
    );
    Ok(())
}

#[test]
fn an_ordinary_loop_keeping_item_stays_flat_and_quiet() -> Result<()> {
    let _g = lock();
    let before = common::log_capture::of_target("tensorguard::autograd", "").len();
    let m = Model::new(3);
    let mut total = 0.0f32;
    let mut stats = Vec::new();
    for _ in 0..8 {
        let loss = m.loss()?;
        loss.backward()?;
        m.step()?;
        total += loss.item::<f32>()?;
        drop(loss);
        stats.push(autograd::graph_stats());
    }
    assert!(total.is_finite());
    for s in &stats {
        assert_eq!(
            (s.live_nodes, s.saved_bytes, s.nodes_from_earlier_steps),
            (0, 0, 0),
            "{stats:#?}"
        );
    }
    assert_eq!(stats[7].step, stats[0].step + 7);
    let after = common::log_capture::of_target("tensorguard::autograd", "").len();
    assert_eq!(before, after, "an ordinary loop must not warn");
    Ok(())
}

#[test]
fn saved_bytes_count_what_backward_frees() -> Result<()> {
    let _g = lock();
    let base = autograd::graph_stats();
    let w = Tensor::ones([256], DType::F32, &CPU)?.requires_grad(true)?;
    let y = w.mul(&w)?; // saves both operands: 2 KiB
    let s = autograd::graph_stats();
    assert_eq!(s.live_nodes, base.live_nodes + 1);
    assert_eq!(s.saved_bytes, base.saved_bytes + 2 * 1024);
    y.sum()?.backward()?;
    let s = autograd::graph_stats();
    assert_eq!(
        s.saved_bytes, base.saved_bytes,
        "backward frees the saved tensors"
    );
    assert_eq!(s.live_nodes, base.live_nodes + 1, "y keeps its node");
    drop(y);
    assert_eq!(autograd::graph_stats().live_nodes, base.live_nodes);
    Ok(())
}

/// Note [Graph teardown]: a graph far deeper than a small stack is
/// dropped without recursion, on another thread than the one that made it
/// (whose counts then go down there: Note [Counts per thread]), and
/// backward runs through it.
#[test]
fn a_deep_graph_is_dropped_without_recursion_on_another_thread() -> Result<()> {
    let _g = lock();
    const DEPTH: usize = 50_000;
    let before = autograd::graph_stats().live_nodes;
    let one = Tensor::ones([1], DType::F32, &CPU)?;
    let a = Tensor::ones([1], DType::F32, &CPU)?.requires_grad(true)?;
    let mut x = a.alias();
    for _ in 0..DEPTH {
        x = x.add(&one)?;
    }
    assert_eq!(autograd::graph_stats().live_nodes, before + DEPTH as u64);
    let y = x.mul(&x)?.sum()?;
    y.backward_with(&Tensor::ones((), DType::F32, &CPU)?, true)?;
    // d(x^2)/da = 2x, x = 1 + DEPTH
    assert_eq!(
        a.grad().expect("a grad").to_vec::<f32>()?,
        vec![2.0 * (1 + DEPTH) as f32]
    );
    // 64 KiB of stack: recursion through 50,000 nodes would overflow it
    std::thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(move || drop((x, y)))
        .expect("spawn")
        .join()
        .expect("the graph is dropped without overflowing the stack");
    assert_eq!(autograd::graph_stats().live_nodes, before);
    Ok(())
}
