//! `tensorguard train` end to end: the binary on the shipped digits (its
//! accuracy, its metrics, its ledgers), a resumed run equal to an
//! uninterrupted one, and its one-line errors.

mod common;

use common::{dir, tg};

use std::path::Path;
use std::process::Output;

use tensorguard::{DType, Device};
use tensorguard_nn::checkpoint;

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn metrics(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("metrics written"))
        .expect("metrics are JSON")
}

#[test]
fn digits_train_to_high_accuracy_with_no_blocking_copy_and_only_the_syncs_asked_for() {
    let d = dir("train", "digits");
    let m = d.join("metrics.json");
    let epochs = 12;
    let o = tg(&[
        "train",
        "--device",
        "emu:0",
        "--epochs",
        &epochs.to_string(),
        "--metrics-json",
        m.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("epoch 12/12") && out.contains("test accuracy"),
        "{out}"
    );
    let v = metrics(&m);
    let acc = v["test_accuracy"].as_f64().unwrap();
    assert!(acc >= 0.95, "digits after {epochs} epochs: {acc}");
    assert_eq!(v["device"], "emu:0");
    // the data was copied to the device once, before training: an epoch
    // (train and test) moves only its order of indices (non-blocking)
    assert_eq!(v["blocking_host_to_device"], 0, "{out}");
    assert!(
        v["host_to_device_bytes"].as_u64().unwrap() <= 8 * (1438 + 359) * epochs,
        "{v}"
    );
    // the host waits only where the loop asks to: the epoch's loss and
    // accuracy, the test loss and accuracy, a synchronize around each
    // training pass (its peak memory) and the final synchronize
    assert_eq!(v["syncs"].as_u64().unwrap(), 6 * epochs + 1, "{out}");
    assert!(v["peak_device_bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["epochs"].as_array().unwrap().len(), epochs as usize);
    assert!(out.contains("no pitfall warnings"), "{out}");
}

fn tensors(path: &Path) -> Vec<(String, Vec<f64>)> {
    let sd = checkpoint::load(path, &Device::Cpu).expect("checkpoint loads");
    sd.iter()
        .map(|(n, t)| {
            (
                n.to_string(),
                t.to_dtype(DType::F64)
                    .and_then(|t| t.to_vec::<f64>())
                    .expect("values"),
            )
        })
        .collect()
}

/// Training 2 epochs, saving, and resuming for 2 more is the same run, bit
/// for bit, as training 4 epochs at once.
#[test]
fn a_resumed_run_equals_an_uninterrupted_one_bit_for_bit() {
    let d = dir("train", "resume");
    let (a, b, c) = (
        d.join("a.safetensors"),
        d.join("b.safetensors"),
        d.join("c.safetensors"),
    );
    // a constant rate: the cosine schedule spans `--epochs`, so a run
    // planned for 2 epochs decays differently from one planned for 4 (as a
    // PyTorch scheduler made with another T_max would)
    let common = [
        "train",
        "--limit",
        "400",
        "--optimizer",
        "adamw",
        "--seed",
        "5",
        "--schedule",
        "constant",
    ];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = common.iter().chain(extra).copied().collect();
        let o = tg(&args);
        assert!(o.status.success(), "{}", text(&o));
        o
    };
    run(&["--epochs", "2", "--save", a.to_str().unwrap()]);
    let o = run(&[
        "--epochs",
        "4",
        "--resume",
        a.to_str().unwrap(),
        "--save",
        b.to_str().unwrap(),
    ]);
    assert!(
        !text(&o).contains("epoch 1/4") && text(&o).contains("epoch 3/4"),
        "{}",
        text(&o)
    );
    run(&["--epochs", "4", "--save", c.to_str().unwrap()]);
    let (tb, tc) = (tensors(&b), tensors(&c));
    assert!(
        tb.iter()
            .any(|(n, _)| n.starts_with("optim.") && n.ends_with(".exp_avg")),
        "{:?}",
        tb.iter().map(|t| &t.0).collect::<Vec<_>>()
    );
    let names = |t: &[(String, Vec<f64>)]| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&tb), names(&tc));
    let differ: Vec<String> = tb
        .iter()
        .zip(&tc)
        .filter(|(x, y)| x.1 != y.1)
        .map(|(x, y)| {
            let d =
                x.1.iter()
                    .zip(&y.1)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
            format!("{} (max difference {d:e})", x.0)
        })
        .collect();
    assert!(
        differ.is_empty(),
        "resumed and uninterrupted runs differ in {differ:?}"
    );
    let sd = checkpoint::load(&c, &Device::Cpu).unwrap();
    assert_eq!(sd.metadata["epoch"], "4");
    // resuming a finished run asks for more epochs; another model is refused
    let o = tg(&[
        "train",
        "--limit",
        "400",
        "--epochs",
        "4",
        "--resume",
        c.to_str().unwrap(),
    ]);
    assert!(
        !o.status.success() && text(&o).contains("--epochs"),
        "{}",
        text(&o)
    );
    let o = tg(&[
        "train",
        "--model",
        "cnn",
        "--epochs",
        "5",
        "--resume",
        c.to_str().unwrap(),
    ]);
    assert!(
        !o.status.success() && text(&o).contains("mlp model"),
        "{}",
        text(&o)
    );
}

fn fails_with(args: &[&str], want: &str) {
    let o = tg(args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{args:?} succeeded: {}", text(&o));
    assert!(err.contains(want), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_is_a_one_line_error() {
    let d = dir("train", "errors");
    fails_with(
        &[
            "train",
            "--dataset",
            "fashion-mnist",
            "--data",
            d.join("nowhere").to_str().unwrap(),
        ],
        "apt-get install dataset-fashion-mnist",
    );
    fails_with(&["train", "--device", "tpu:0"], "tpu:0");
    // device errors advise flags, not the library's Rust calls
    fails_with(
        &["train", "--device", "gpu"],
        "--device gpu: not a device name. Write cpu, emu:N or cuda:N",
    );
    for (dev, hint) in [
        ("cuda:99", "use --device emu:0"),
        ("emu:99", "TENSORGUARD_EMULATED"),
    ] {
        let o = tg(&["train", "--device", dev]);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{dev}: {}", text(&o));
        assert!(err.contains(&format!("error: --device {dev}: ")), "{err}");
        assert!(err.contains(hint), "{err}");
        assert!(
            !err.contains("Device::") && !err.contains("configure_emulated"),
            "{err}"
        );
    }
    fails_with(&["train", "--memory-fraction", "0"], "--memory-fraction");
    fails_with(&["train", "--batch-size", "0"], "--batch-size");
    fails_with(&["train", "--accum-steps", "0"], "--accum-steps");
    fails_with(&["train", "--lr=-1"], "--lr");
    // a negative value reaches the flag's own check (not `unexpected
    // argument '-1' found`)
    fails_with(
        &["train", "--lr", "-1"],
        "--lr must be a positive number, got -1",
    );
    fails_with(
        &["train", "--batch-size", "-5"],
        "'--batch-size <BATCH_SIZE>': must be a whole number, 0 or more, got -5",
    );
    fails_with(
        &["train", "--epochs", "1.5"],
        "must be a whole number, got 1.5",
    );
    fails_with(&["train", "--limit", "0"], "--limit");
    let bad = d.join("bad.safetensors");
    std::fs::write(&bad, b"not a checkpoint").unwrap();
    fails_with(
        &["train", "--resume", bad.to_str().unwrap()],
        "bad.safetensors",
    );
    // a device too small for the model: out of memory, said in one line
    fails_with(
        &[
            "train",
            "--device",
            "emu:0",
            "--memory-fraction",
            "0.0000001",
        ],
        "Out of memory",
    );
}

fn peak(d: &Path, name: &str, extra: &[&str]) -> u64 {
    let m = d.join(format!("{name}.json"));
    let mut args = vec![
        "train",
        "--model",
        "cnn",
        "--epochs",
        "1",
        "--batch-size",
        "512",
        "--device",
        "cpu",
        "--metrics-json",
        m.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = tg(&args);
    assert!(o.status.success(), "{args:?}: {}", text(&o));
    metrics(&m)["peak_device_bytes"].as_u64().unwrap()
}

/// `--amp`, `--checkpoint-activations`, `--profile TRACE` and
/// `--memory-snapshot PATH` reach the library: autocast and checkpointing
/// lower the training peak of the same CNN, the scaler runs with f16, and
/// the trace and the snapshot are written and readable.
#[test]
fn mixed_precision_checkpointing_profile_and_snapshot_from_the_command_line() {
    let d = dir("train", "features");
    let f32_peak = peak(&d, "f32", &[]);
    let ckpt = peak(&d, "ckpt", &["--checkpoint-activations"]);
    let bf16 = peak(&d, "bf16", &["--amp", "bf16"]);
    assert!(ckpt < f32_peak, "checkpointing: {ckpt} vs {f32_peak}");
    assert!(bf16 < f32_peak, "bf16 autocast: {bf16} vs {f32_peak}");

    let (trace, snap, m) = (
        d.join("trace.json"),
        d.join("mem.pickle"),
        d.join("f16.json"),
    );
    let o = tg(&[
        "train",
        "--limit",
        "256",
        "--epochs",
        "1",
        "--amp",
        "f16",
        "--profile",
        trace.to_str().unwrap(),
        "--memory-snapshot",
        snap.to_str().unwrap(),
        "--metrics-json",
        m.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("Self CPU"),
        "the profiler's table: {}",
        text(&o)
    );
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert!(t["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
    let s = tensorguard::memory::read_snapshot(&snap).expect("the snapshot reads back");
    assert!(
        !s.device_traces.is_empty() && s.device_traces[0].len() > 10,
        "allocator history recorded"
    );
    assert!(metrics(&m)["skipped_steps"].is_u64());
}
