//! `tensorguard train`: the project's main job. Trains a classifier with the
//! practices that keep a training loop fast and out of trouble — data
//! copied to the device once or prefetched from pinned memory on a side
//! stream, no hidden synchronisation in the loop, losses accumulated as
//! device tensors (never as a graph), optional mixed precision, gradient
//! accumulation and activation checkpointing — and reports what it cost:
//! time, peak memory, the bytes moved each way and the synchronisations.

mod data;
pub mod model;
mod options;
mod parallel;
mod report;

use std::time::Instant;

use tensorguard::autograd::no_grad;
use tensorguard::{memory, transfer, DType, Device, Tensor};
use tensorguard_nn::amp::GradScaler;
use tensorguard_nn::optim::{
    Adam, AdamConfig, AdamW, ConstantLr, LrScheduler, Optimizer, Sgd, SgdConfig, WarmupCosine,
};
use tensorguard_nn::{Module, StateDict};

pub use model::{ModelKind, Net};
pub use options::{AmpKind, DatasetKind, OptimizerKind, ScheduleKind, TrainOptions};
pub use report::{install_warning_capture, warnings_seen, EpochStats, TrainReport};

use data::{Batches, Data};
use parallel::Model;
use tensorguard_distributed::ProcessGroup;

/// A one-line error for the command line.
type Res<T> = std::result::Result<T, String>;

fn tg<T>(r: tensorguard::Result<T>) -> Res<T> {
    r.map_err(|e| e.to_string())
}

/// The device to train on: `--device`, else the (local rank's) first GPU,
/// else the cpu.
fn pick_device(opts: &TrainOptions, group: Option<&ProcessGroup>) -> Res<Device> {
    let Some(name) = &opts.device else {
        let dev = parallel::default_device(group);
        tg(dev.check_available())?;
        return Ok(dev);
    };
    let dev = Device::parse(name).map_err(|_| {
        format!(
            "--device {name}: not a device name. Write cpu, emu:N or cuda:N (e.g. --device emu:0); `tensorguard doctor` lists this machine's devices."
        )
    })?;
    dev.check_available()
        .map_err(|e| unavailable(name, &dev, &e.to_string()))?;
    Ok(dev)
}

/// The error for `--device name` that this machine cannot use: the
/// library's reason (its first sentence) with advice in flags, not the
/// library's Rust calls.
fn unavailable(name: &str, dev: &Device, why: &str) -> String {
    let reason = why.split_once(". ").map_or(why, |(first, _)| first);
    let reason = reason.trim_end_matches('.');
    let hint = match dev {
        Device::Emulated(_) => {
            "Use --device emu:0, or set TENSORGUARD_EMULATED (e.g. `4x2GiB`) for more emulated devices."
        }
        _ => {
            "Leave out --device to train on the first GPU (else the cpu), or use --device emu:0 to see the device-side reports without a GPU."
        }
    };
    format!("--device {name}: {reason}. {hint}")
}

fn check(opts: &TrainOptions) -> Res<()> {
    if opts.batch_size == 0 {
        return Err("--batch-size must be at least 1.".into());
    }
    if opts.accum_steps == 0 || opts.accum_steps > opts.batch_size {
        return Err(format!(
            "--accum-steps must be between 1 and the batch size ({}), got {}.",
            opts.batch_size, opts.accum_steps
        ));
    }
    if let Some(f) = opts.memory_fraction {
        if !(f > 0.0 && f <= 1.0) {
            return Err(format!("--memory-fraction must be in (0, 1], got {f}."));
        }
    }
    if let Some(lr) = opts.lr {
        if !(lr > 0.0 && lr.is_finite()) {
            return Err(format!("--lr must be a positive number, got {lr}."));
        }
    }
    if opts.limit == Some(0) {
        return Err("--limit must be at least 1 (it is how many training examples to use).".into());
    }
    if opts.epochs == Some(0) {
        return Err("--epochs must be at least 1.".into());
    }
    Ok(())
}

fn make_optimizer(opts: &TrainOptions, model: &Net) -> Res<Box<dyn Optimizer>> {
    let params = model.named_parameters();
    // Adam's rate: PyTorch's 1e-3 for the MLP; the CNN reaches 91% on
    // Fashion-MNIST in 4 epochs at 3e-3 (89.7% at 1e-3)
    let adam_lr = opts.lr.unwrap_or(match opts.model {
        ModelKind::Mlp => 1e-3,
        ModelKind::Cnn => 3e-3,
    });
    Ok(match opts.optimizer {
        OptimizerKind::Sgd => {
            let cfg = SgdConfig {
                momentum: 0.9,
                ..SgdConfig::new(opts.lr.unwrap_or(0.05))
            };
            Box::new(tg(Sgd::new(params, cfg))?)
        }
        OptimizerKind::Adam => Box::new(tg(Adam::new(params, AdamConfig::adam(adam_lr)))?),
        OptimizerKind::Adamw => Box::new(tg(AdamW::new(params, AdamConfig::adamw(adam_lr)))?),
    })
}

/// Everything a run has: the model, its optimizer and scaler, where it is.
struct Run {
    opts: TrainOptions,
    dev: Device,
    model: Model,
    /// The data-parallel group, when training across processes.
    group: Option<ProcessGroup>,
    opt: Box<dyn Optimizer>,
    scaler: GradScaler,
    data: Data,
    epochs: u64,
    start_epoch: u64,
    /// The most memory the training steps of an epoch had allocated.
    peak_train: usize,
    /// The learning rate the schedule starts from.
    base_lr: f64,
}

/// Train as `opts` says and return the report (the CLI prints it).
///
/// Errors are one-line messages (a missing dataset says how to get it).
pub fn run(opts: &TrainOptions) -> Res<TrainReport> {
    check(opts)?;
    let group = parallel::join(opts)?;
    let is_main = group.as_ref().is_none_or(|g| g.rank() == 0);
    let dev = pick_device(opts, group.as_ref())?;
    if let Some(f) = opts.memory_fraction {
        tg(memory::set_per_process_memory_fraction(f, &dev))?;
    }
    if opts.memory_snapshot.is_some() {
        tg(memory::record_history(
            &dev,
            memory::HistoryOptions::default(),
        ))?;
    }
    tensorguard::manual_seed(opts.seed);
    let data = data::load(opts, &dev, parallel::shard(group.as_ref(), opts.seed)?)?;
    let mut model = tg(Net::new(
        opts.model,
        &data.shape,
        data.classes,
        opts.checkpoint_activations,
        &Device::Cpu,
    ))?;
    tg(model.to_device(&dev))?;
    let opt = make_optimizer(opts, &model)?;
    let scaler = match opts.amp {
        Some(AmpKind::F16) => GradScaler::new(),
        _ => GradScaler::disabled(),
    };
    let epochs = opts.epochs.unwrap_or(match opts.dataset {
        DatasetKind::Digits => 30,
        DatasetKind::FashionMnist => 4,
    });
    let mut run_opts = opts.clone();
    // one progress bar, epoch lines and checkpoint: rank 0's
    run_opts.no_progress |= !is_main;
    if !is_main {
        run_opts.save = None;
    }
    let mut run = Run {
        opts: run_opts,
        dev,
        model: Model::Plain(model),
        group: None,
        opt,
        scaler,
        data,
        epochs,
        start_epoch: 0,
        peak_train: 0,
        base_lr: 0.0,
    };
    run.base_lr = run.opt.lr();
    if let Some(path) = &opts.resume {
        run.resume(path)?;
    }
    if let Some(g) = &group {
        run.model = run.model.wrap(g)?;
        run.group = Some(g.clone());
    }
    let t0 = Instant::now();
    let ledger0 = transfer::stats_for(&dev);
    let sync0 = transfer::sync_stats();
    let rank = group.as_ref().map_or(0, ProcessGroup::rank);
    let trace = opts.profile.as_deref().map(|p| parallel::per_rank(p, rank));
    let history = if let Some(trace) = &trace {
        let opts_p = tensorguard::profiler::ProfileOptions {
            profile_memory: true,
            ..Default::default()
        };
        let (h, prof) = tg(tensorguard::profiler::profile(opts_p, || {
            run.train_epochs().map_err(tensorguard::Error::Device)
        }))?;
        tg(prof.export_chrome_trace(trace))?;
        if rank == 0 {
            println!(
                "{}",
                prof.key_averages()
                    .table(tensorguard::profiler::SortBy::SelfCpuTimeTotal, 15)
            );
            println!("chrome trace: {}", trace.display());
        }
        h
    } else {
        run.train_epochs()?
    };
    tg(tensorguard::device::synchronize(&dev))?;
    let wall = t0.elapsed();
    let moved = transfer::stats_for(&dev).since(&ledger0);
    let syncs = transfer::sync_stats().since(&sync0);
    if let Some(path) = &opts.memory_snapshot {
        tg(memory::dump_snapshot(&dev, parallel::per_rank(path, rank)))?;
    }
    let last = history.last().cloned().unwrap_or_default();
    let trained = history.iter().map(|e| e.samples).sum::<u64>();
    let (rank, world_size) = group
        .as_ref()
        .map_or((0, 1), |g| (g.rank(), g.world_size()));
    let collectives = match &group {
        None => "none".to_string(),
        Some(g) if g.uses_nccl() && matches!(dev, Device::Cuda(_)) => "nccl".to_string(),
        Some(g) => g.backend_name().to_string(),
    };
    Ok(TrainReport {
        device: dev,
        rank,
        world_size,
        collectives,
        model: run.model.module().describe(),
        parameters: run.model.module().num_parameters(),
        epochs: history,
        test_accuracy: last.test_accuracy,
        test_loss: last.test_loss,
        train_loss: last.train_loss,
        wall_s: wall.as_secs_f64(),
        samples_per_s: trained as f64 / wall.as_secs_f64().max(1e-9),
        peak_device_bytes: run.peak_train,
        host_to_device_bytes: moved.host_to_device.total.bytes,
        device_to_host_bytes: moved.device_to_host.total.bytes,
        blocking_host_to_device: moved.host_to_device.blocking.copies,
        syncs: syncs.syncs,
        skipped_steps: run.scaler.skipped_steps(),
        memory_summary: memory::summary(&dev),
        transfer_report: transfer::report_top(8),
        sync_report: transfer::sync_report_top(8),
        warnings: warnings_seen(),
    })
}

impl Run {
    fn is_main(&self) -> bool {
        self.group.as_ref().is_none_or(|g| g.rank() == 0)
    }

    fn train_epochs(&mut self) -> Res<Vec<EpochStats>> {
        let mut history = Vec::new();
        for epoch in self.start_epoch..self.epochs {
            let t = Instant::now();
            let (train_loss, train_acc, samples) = self.train_epoch(epoch)?;
            let (test_loss, test_accuracy) = self.evaluate()?;
            let e = EpochStats {
                epoch: epoch + 1,
                train_loss,
                train_accuracy: train_acc,
                test_loss,
                test_accuracy,
                samples,
                seconds: t.elapsed().as_secs_f64(),
            };
            if self.is_main() {
                println!("{}", e.line(self.epochs));
            }
            history.push(e);
            if let Some(path) = self.opts.save.clone() {
                self.save(&path, epoch + 1)?;
            }
        }
        Ok(history)
    }

    /// One pass over the training set; returns (mean loss, accuracy, samples).
    fn train_epoch(&mut self, epoch: u64) -> Res<(f64, f64, u64)> {
        self.model.module_mut().train();
        let dev = self.dev;
        // the peak of the training steps alone (evaluation runs larger
        // batches without a graph, which is another question)
        tg(tensorguard::device::synchronize(&dev))?;
        memory::reset_peak(&dev);
        let accum = self.opts.accum_steps;
        let micro = self.opts.batch_size.div_ceil(accum);
        let amp = self.opts.amp;
        let mut batches: Batches<'_> = self.data.train.epoch(epoch, micro)?;
        let n_batches = batches.len();
        // the learning rate follows a warm-up then a cosine decay over the
        // whole run, a closed form of the step, so a resumed run agrees
        let steps_per_epoch = n_batches.div_ceil(accum) as u64;
        let schedule = schedule(
            self.opts.schedule,
            self.base_lr,
            self.epochs,
            steps_per_epoch,
        );
        let mut step = epoch * steps_per_epoch;
        self.opt.set_lr(schedule.lr_at(step));
        let bar = report::progress_bar(
            n_batches as u64,
            epoch + 1,
            self.epochs,
            self.opts.no_progress,
        );
        // running sums stay on the device: reading them is a sync, done
        // for the progress bar every few dozen steps and at the end
        let loss_sum = tg(Tensor::zeros((), DType::F32, &dev))?;
        let correct = tg(Tensor::zeros((), DType::I64, &dev))?;
        let mut seen = 0u64;
        let mut micro_in_step = 0;
        tg(self.opt.zero_grad(true))?;
        let mut i = 0usize;
        while let Some(batch) = batches.next_batch()? {
            let (x, y) = batch;
            let b = y.numel();
            let logits = tg(forward_logits(self.model.module(), &x, amp))?;
            let loss = tg(data::loss(&logits, &y))?;
            tg(tally(&loss_sum, &correct, &loss, &logits, &y))?;
            // a micro-batch's loss is divided by the number of
            // micro-batches, so the accumulated gradient is the full
            // batch's (PyTorch's recipe)
            let scaled = if accum > 1 {
                tg(loss.div(accum as f64))?
            } else {
                loss
            };
            // data-parallel: only the step's last micro-batch averages
            let sync = micro_in_step + 1 == accum || i + 1 == n_batches;
            tg(self.model.backward(&tg(self.scaler.scale(&scaled))?, sync))?;
            drop(scaled);
            micro_in_step += 1;
            seen += b as u64;
            i += 1;
            if micro_in_step == accum || i == n_batches {
                tg(self.scaler.step(self.opt.as_mut()))?;
                self.scaler.update();
                tg(self.opt.zero_grad(true))?;
                micro_in_step = 0;
                step += 1;
                self.opt.set_lr(schedule.lr_at(step));
            }
            if let Some(bar) = &bar {
                bar.inc(1);
                if i.is_multiple_of(50) || i == n_batches {
                    let l = tg(loss_sum.item::<f32>())? as f64 / seen.max(1) as f64;
                    let a = tg(correct.item::<i64>())? as f64 / seen.max(1) as f64;
                    bar.set_message(format!("loss {l:.4}  acc {:.1}%", 100.0 * a));
                }
            }
        }
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        // data-parallel: every rank's share counted
        let seen = parallel::sum_over_ranks(self.group.as_ref(), &[&loss_sum, &correct], seen)?;
        let l = tg(loss_sum.item::<f32>())? as f64 / seen.max(1) as f64;
        let a = tg(correct.item::<i64>())? as f64 / seen.max(1) as f64;
        tg(tensorguard::device::synchronize(&dev))?;
        self.peak_train = self.peak_train.max(memory::max_allocated(&dev));
        Ok((l, a, seen))
    }

    /// (mean loss, accuracy) on the test set, in evaluation mode, without a graph.
    fn evaluate(&mut self) -> Res<(f64, f64)> {
        self.model.module_mut().eval();
        let dev = self.dev;
        let amp = self.opts.amp;
        let model = self.model.module();
        let test = &mut self.data.test;
        let r = no_grad(|| -> Res<(f64, f64)> {
            let loss_sum = tg(Tensor::zeros((), DType::F32, &dev))?;
            let correct = tg(Tensor::zeros((), DType::I64, &dev))?;
            let mut seen = 0u64;
            let mut batches = test.epoch(0, 1000)?;
            while let Some((x, y)) = batches.next_batch()? {
                let logits = tg(forward_logits(model, &x, amp))?;
                let b = y.numel();
                tg(tally(
                    &loss_sum,
                    &correct,
                    &tg(data::loss(&logits, &y))?,
                    &logits,
                    &y,
                ))?;
                seen += b as u64;
            }
            let l = tg(loss_sum.item::<f32>())? as f64 / seen.max(1) as f64;
            let a = tg(correct.item::<i64>())? as f64 / seen.max(1) as f64;
            Ok((l, a))
        });
        self.model.module_mut().train();
        r
    }

    /// Write model, optimizer and scaler state, the epoch and the RNG.
    fn save(&self, path: &std::path::Path, epochs_done: u64) -> Res<()> {
        let mut sd = self.model.module().state_dict();
        sd.extend_prefixed("optim.", self.opt.state_dict());
        sd.extend_prefixed("scaler.", self.scaler.state_dict());
        let rng = tensorguard::default_generator().state().to_bytes();
        sd.metadata.insert("rng".into(), hex(&rng));
        sd.metadata.insert("epoch".into(), epochs_done.to_string());
        sd.metadata
            .insert("seed".into(), self.opts.seed.to_string());
        sd.metadata.insert(
            "model".into(),
            format!("{:?}", self.opts.model).to_lowercase(),
        );
        sd.metadata
            .insert("dataset".into(), format!("{:?}", self.opts.dataset));
        tg(tensorguard_nn::checkpoint::save(path, &sd))
    }

    fn resume(&mut self, path: &std::path::Path) -> Res<()> {
        let sd = tg(tensorguard_nn::checkpoint::load(path, &self.dev))?;
        let meta = |k: &str| -> Res<String> {
            sd.metadata.get(k).cloned().ok_or_else(|| {
                format!("{}: the checkpoint has no `{k}` metadata; was it written by `tensorguard train --save`?", path.display())
            })
        };
        let model_kind = meta("model")?;
        let want = format!("{:?}", self.opts.model).to_lowercase();
        if model_kind != want {
            return Err(format!(
                "{}: the checkpoint is of a {model_kind} model, but --model is {want}.",
                path.display()
            ));
        }
        let mut model_sd = StateDict::new();
        for (n, t) in sd.iter() {
            if !n.starts_with("optim.") && !n.starts_with("scaler.") {
                model_sd.insert(n, t.alias());
            }
        }
        tg(self.model.net_mut()?.load_state_dict(&model_sd))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        tg(self.opt.load_state_dict(&sd.strip_prefix("optim.")))?;
        let scaler_sd = sd.strip_prefix("scaler.");
        if !scaler_sd.metadata.is_empty() {
            tg(self.scaler.load_state_dict(&scaler_sd))?;
        }
        let rng = unhex(&meta("rng")?).ok_or_else(|| {
            format!(
                "{}: the checkpoint's `rng` metadata is not hex.",
                path.display()
            )
        })?;
        let state = tg(tensorguard::GeneratorState::from_bytes(&rng))?;
        tensorguard::default_generator().set_state(&state);
        self.start_epoch = meta("epoch")?.parse().map_err(|_| {
            format!(
                "{}: the checkpoint's `epoch` is not a number.",
                path.display()
            )
        })?;
        if self.start_epoch >= self.epochs {
            return Err(format!(
                "{}: the checkpoint has already trained {} epochs; ask for more with --epochs N (N > {}).",
                path.display(),
                self.start_epoch,
                self.start_epoch
            ));
        }
        Ok(())
    }
}

/// The model's logits for `x` in f32, under autocast when `--amp` asks
/// for it (the loss is on autocast's f32 list either way).
fn forward_logits(
    model: &dyn Module,
    x: &Tensor,
    amp: Option<AmpKind>,
) -> tensorguard::Result<Tensor> {
    let _autocast = match amp {
        Some(AmpKind::Bf16) => Some(tensorguard::autocast::autocast(DType::BF16)?),
        Some(AmpKind::F16) => Some(tensorguard::autocast::autocast(DType::F16)?),
        None => None,
    };
    model.forward(x)?.to_dtype(DType::F32)
}

/// Add a batch's summed loss and its count of correct predictions to the
/// running sums, on the device, without a graph and without waiting.
fn tally(
    loss_sum: &Tensor,
    correct: &Tensor,
    loss: &Tensor,
    logits: &Tensor,
    y: &Tensor,
) -> tensorguard::Result<()> {
    no_grad(|| {
        loss_sum.add_(&loss.detach().mul(y.numel() as f64)?)?;
        correct.add_(&logits.argmax_dim(1, false)?.eq(y)?.sum()?)?;
        Ok(())
    })
}

/// The run's learning-rate schedule: constant, or a linear warm-up over
/// half an epoch then a cosine decay to 0 at the last step.
fn schedule(
    kind: ScheduleKind,
    base: f64,
    epochs: u64,
    steps_per_epoch: u64,
) -> Box<dyn LrScheduler> {
    match kind {
        ScheduleKind::Constant => Box::new(ConstantLr(base)),
        ScheduleKind::Cosine => Box::new(WarmupCosine::new(
            base,
            steps_per_epoch / 2,
            epochs * steps_per_epoch,
        )),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
