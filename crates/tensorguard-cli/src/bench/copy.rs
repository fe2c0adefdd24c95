//! `tensorguard bench copy`: the measurements.
//!
//! Each case is timed as the PyTorch reference script times it: the copy
//! is issued, then the devices it runs on are synchronized, and the wall
//! time of both is one run; the median of the timed runs after the warm-up
//! runs is reported. Tensors are float32 and contiguous.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use tensorguard::device::{self, EmulatedConfig};
use tensorguard::transfer::{self, CopyOpts, RepeatPolicy};
use tensorguard::{memory, DType, Device, DeviceKind, Error, Tensor};

use super::args::CopyArgs;
use super::output::{self, Reference};
use super::plot;
use super::report::{CopyReport, Kind, Row};
use super::sizes::{default_sizes, format_size, parse_list, parse_size};

/// Runs per case for `bytes` (the reference script's schedule by default).
fn runs_for(args: &CopyArgs, bytes: usize) -> usize {
    args.repeats
        .unwrap_or(if bytes <= 16 << 20 { 20 } else { 5 })
}

/// The most timed runs per case `--repeats` accepts: the median has long
/// settled (the default is 20), and at 1 GiB this many copies already take
/// minutes.
pub const MAX_REPEATS: usize = 10_000;
/// The most untimed runs per case `--warmup` accepts.
pub const MAX_WARMUP: usize = 1_000;

/// `--repeats` and `--warmup` within what can finish (a huge count would
/// overflow the timing buffer or run for ever).
fn check_counts(args: &CopyArgs) -> Result<(), String> {
    match args.repeats {
        Some(0) => return Err("bench copy: `--repeats 0` leaves nothing to take the median of. Use at least 1 (the default is 20 up to 16 MiB, 5 above).".into()),
        Some(n) if n > MAX_REPEATS => return Err(format!("bench copy: `--repeats {n}` is more than the limit of {MAX_REPEATS} timed runs per case; that many copies of the larger sizes would not finish. Use at most {MAX_REPEATS} (the default is 20 up to 16 MiB, 5 above; the median settles long before).")),
        _ => {}
    }
    if args.warmup > MAX_WARMUP {
        return Err(format!("bench copy: `--warmup {}` is more than the limit of {MAX_WARMUP} untimed runs per case; that many would not finish. Use at most {MAX_WARMUP} (the default, 2, is enough to fill the caches).", args.warmup));
    }
    Ok(())
}

/// `tensorguard bench copy`.
pub fn run_copy(args: &CopyArgs) -> Result<(), String> {
    check_counts(args)?;
    let mut sizes = match &args.sizes {
        Some(s) => parse_list(s)?,
        None => default_sizes(),
    };
    if let Some(m) = &args.max_size {
        let max = parse_size(m)?;
        sizes.retain(|&b| b <= max);
        if sizes.is_empty() {
            return Err(format!("bench copy: no size is at most `--max-size {m}`. Raise it or give smaller `--sizes` (the smallest default is 1 KiB)."));
        }
    }
    if let Some(p) = &args.plot {
        plot::check_path(p)?;
    }
    let reference = args.reference.as_deref().map(Reference::load).transpose()?;
    let max = sizes.iter().copied().max().unwrap_or(0);
    let dev = choose_device(args.device.as_deref(), max)?;
    dev.check_available()
        .map_err(|e| format!("bench copy: {dev} can't be measured: {e}"))?;
    let peer = peer_of(&dev);
    check_host_memory(&dev, max)?;

    let before = transfer::repeat_policy();
    // the same host tensor is copied again and again on purpose
    transfer::set_repeat_policy(RepeatPolicy::Off);
    let result = measure(args, &dev, peer, &sizes);
    transfer::set_repeat_policy(before);
    let report = result?;

    print!("{}", output::table(&report, reference.as_ref()));
    if let Some(p) = &args.csv {
        output::write_file(p, &output::csv(&report))?;
    }
    if let Some(p) = &args.json {
        output::write_file(p, &output::json(&report))?;
    }
    if let Some(p) = &args.plot {
        plot::draw(p, &report)?;
    }
    Ok(())
}

/// The device to measure: `--device`, else the first CUDA device, else
/// `emu:0`. For emulated devices, makes sure their capacity holds the
/// largest case (two tensors of `max` bytes on the device).
fn choose_device(wanted: Option<&str>, max: usize) -> Result<Device, String> {
    let dev = match wanted {
        Some(s) => Device::parse(s).map_err(|e| format!("bench copy: {e}"))?,
        None if device::count(DeviceKind::Cuda) > 0 => Device::Cuda(0),
        None => Device::Emulated(0),
    };
    if dev.is_cpu() {
        return Err("bench copy: `--device cpu` names the host, and this benchmark measures copies between the host and a device. Use `--device emu:0` or `--device cuda:0`.".into());
    }
    if let Device::Emulated(i) = dev {
        let need = 2 * max + (64 << 20);
        match std::env::var("TENSORGUARD_EMULATED") {
            Ok(v) => {
                let cfg = EmulatedConfig::parse(&v).map_err(|e| format!("bench copy: {e}"))?;
                if let Some(&cap) = cfg.capacities.get(i) {
                    if cap < need {
                        return Err(format!(
                            "bench copy: a {} case needs about {} on {dev} (the source and one copy), and TENSORGUARD_EMULATED={v} gives it {}. Raise its capacity (e.g. TENSORGUARD_EMULATED=2x{}GiB) or measure smaller sizes with `--max-size`.",
                            format_size(max),
                            memory::format_bytes(need as u64),
                            memory::format_bytes(cap as u64),
                            need.div_ceil(1 << 30)
                        ));
                    }
                }
            }
            Err(_) => {
                // capacity is only a limit (memory is taken as tensors need
                // it): raise it when the default 4 GiB is too small
                let default = EmulatedConfig::default();
                if default.capacities.iter().any(|&c| c < need) {
                    let count = default.capacities.len().max(i + 1);
                    device::configure_emulated(EmulatedConfig::uniform(count, need))
                        .map_err(|e| format!("bench copy: {e}"))?;
                }
            }
        }
    }
    Ok(dev)
}

/// Bytes of host memory the system can give now (`MemAvailable` of
/// `/proc/meminfo`), `None` where that file does not exist.
fn host_available() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuse, before measuring, a largest case the host can't hold: its
/// tensors take about three times its size at once on the host (a pinned
/// and a pageable copy, plus the device side, which is host memory on an
/// emulated device), twice for a real device.
fn check_host_memory(dev: &Device, max: usize) -> Result<(), String> {
    let times = if dev.kind() == DeviceKind::Emulated {
        3
    } else {
        2
    };
    let need = times * max + (256 << 20);
    match host_available() {
        Some(avail) if avail < need => Err(format!(
            "bench copy: the {} case needs about {} of host memory at once (the host tensors{}), and the system has {} available. Measure smaller sizes with `--max-size {}`, or free host memory.",
            format_size(max),
            memory::format_bytes(need as u64),
            if times == 3 { ", and the emulated device's memory, which is host memory" } else { "" },
            memory::format_bytes(avail as u64),
            format_size((avail.saturating_sub(256 << 20) / times).next_power_of_two() / 2)
                .replace(' ', "")
        )),
        _ => Ok(()),
    }
}

/// The other device of the device → device copies: the next one of the
/// same kind, else the previous one.
fn peer_of(dev: &Device) -> Option<Device> {
    let (n, make): (usize, fn(usize) -> Device) = match dev {
        Device::Emulated(i) => (*i, Device::Emulated),
        Device::Cuda(i) => (*i, Device::Cuda),
        Device::Cpu => return None,
    };
    let count = device::count(dev.kind());
    if n + 1 < count {
        Some(make(n + 1))
    } else if n > 0 && n < count {
        Some(make(n - 1))
    } else {
        None
    }
}

/// Median and minimum seconds of `f` over `runs` after `warmup` runs. `f`
/// returns what it made, dropped outside the timed region.
pub(super) fn time_case<T>(
    warmup: usize,
    runs: usize,
    mut f: impl FnMut() -> tensorguard::Result<T>,
) -> tensorguard::Result<(f64, f64)> {
    for _ in 0..warmup {
        drop(f()?);
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        let made = f()?;
        times.push(t0.elapsed());
        drop(made);
    }
    times.sort_unstable();
    let mid = times.len() / 2;
    let median = if times.len() % 2 == 1 {
        times[mid]
    } else {
        (times[mid - 1] + times[mid]) / 2
    };
    Ok((
        median.as_secs_f64(),
        times
            .first()
            .copied()
            .unwrap_or(Duration::ZERO)
            .as_secs_f64(),
    ))
}

/// The message of a failed case, with a hint when memory ran out.
fn case_error(kind: Kind, bytes: usize, dev: &Device, e: Error) -> String {
    let hint = if matches!(e, Error::OutOfMemory(_)) {
        format!(" Measure smaller sizes with `--max-size`, free host memory, or raise the emulated capacity (TENSORGUARD_EMULATED=2x8GiB) if {dev} is emulated.")
    } else {
        String::new()
    };
    format!(
        "bench copy: the {} copy of {} failed: {e}{hint}",
        kind.name(),
        format_size(bytes)
    )
}

/// Free every cache the cases use, so that the next size starts clean.
fn free_caches(devs: &[Device]) {
    for d in devs {
        memory::empty_cache(d);
    }
    memory::empty_cache(&Device::Cpu);
    memory::host_empty_cache();
}

fn progress(args: &CopyArgs, total: u64) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if args.quiet || !std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]") {
        pb.set_style(style);
    }
    pb
}

fn measure(
    args: &CopyArgs,
    dev: &Device,
    peer: Option<Device>,
    sizes: &[usize],
) -> Result<CopyReport, String> {
    let cases_per_size = 1 + 2 * (Kind::COPIES.len() - usize::from(peer.is_none()));
    let pb = progress(args, (sizes.len() * cases_per_size) as u64);
    let mut rows = Vec::new();
    let mut devs = vec![*dev];
    devs.extend(peer);
    for &bytes in sizes {
        let runs = runs_for(args, bytes);
        pb.set_message(format!("{} memcpy", format_size(bytes)));
        let (median_s, min_s) = memcpy_case(bytes, args.warmup, runs)?;
        rows.push(Row {
            kind: Kind::Memcpy,
            non_blocking: false,
            bytes,
            median_s,
            min_s,
            runs,
        });
        pb.inc(1);
        for kind in Kind::COPIES {
            if kind == Kind::D2d && peer.is_none() {
                continue;
            }
            for non_blocking in [false, true] {
                pb.set_message(format!(
                    "{} {}{}",
                    format_size(bytes),
                    kind.name(),
                    if non_blocking { " non_blocking" } else { "" }
                ));
                let (median_s, min_s) =
                    copy_case(kind, non_blocking, dev, peer, bytes, args.warmup, runs)
                        .map_err(|e| case_error(kind, bytes, dev, e))?;
                rows.push(Row {
                    kind,
                    non_blocking,
                    bytes,
                    median_s,
                    min_s,
                    runs,
                });
                free_caches(&devs);
                pb.inc(1);
            }
        }
        for d in &devs {
            device::synchronize(d).map_err(|e| format!("bench copy: {e}"))?;
        }
        free_caches(&devs);
    }
    pb.finish_and_clear();
    let mut skipped = Vec::new();
    if peer.is_none() {
        skipped.push(format!(
            "d2d: device -> device copies need a second {} device, and only {dev} is configured{}.",
            dev.kind_name(),
            if dev.kind() == DeviceKind::Emulated {
                " (set TENSORGUARD_EMULATED=2x4GiB for two)"
            } else {
                ""
            }
        ));
    }
    Ok(CopyReport {
        device: *dev,
        peer,
        sizes: sizes.to_vec(),
        warmup: args.warmup,
        repeats: args.repeats,
        rows,
        skipped,
        notes: notes(dev),
    })
}

/// How to read the figures on this device.
fn notes(dev: &Device) -> Vec<String> {
    let mut v = vec![
        "each time is one copy issued and its devices synchronized (median of the timed runs); GB/s = bytes / time / 1e9; 'x memcpy' = the memcpy's time / the copy's time.".to_string(),
        "d2h_pageable with non_blocking is the same synchronous copy (a pageable destination can't be written asynchronously, as in CUDA); non_blocking d2h_pinned lands in a new pinned tensor (`to_with`); clone has no non_blocking option, so both of its rows time the same call (as in the reference script).".to_string(),
    ];
    if dev.kind() == DeviceKind::Emulated {
        v.insert(
            0,
            format!("{dev} is an emulated device whose memory is host memory: host <-> {dev} copies are host memcpys run by its stream worker, so these GB/s are memcpy speeds, not PCIe or NVLink. Compare them with the memcpy row measured in this run; the PyTorch table of a real GPU is in docs/reference/h200/copy_table.csv."),
        );
    }
    v
}

/// A plain host copy of `bytes`: parallel over the kernel threads above
/// 512 KiB, as the library's copy kernel and `benches/core.rs` do.
fn memcpy_case(bytes: usize, warmup: usize, runs: usize) -> Result<(f64, f64), String> {
    let n = bytes / 4;
    let alloc = || -> Result<Vec<f32>, String> {
        let mut v = Vec::new();
        v.try_reserve_exact(n).map_err(|_| {
            format!("bench copy: the host has no room for the {} memcpy reference buffers. Measure smaller sizes with `--max-size`.", format_size(bytes))
        })?;
        v.resize(n, 1.0f32);
        Ok(v)
    };
    let src = alloc()?;
    let mut dst = alloc()?;
    let threads = rayon::current_num_threads();
    let chunk = (n / (threads * 4)).max(1 << 15);
    time_case(warmup, runs, || {
        if n >= 1 << 17 {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s));
        } else {
            dst.copy_from_slice(&src);
        }
        std::hint::black_box(&dst);
        Ok(())
    })
    .map_err(|e| format!("bench copy: {e}"))
}

/// One copy case: its tensors live only here.
fn copy_case(
    kind: Kind,
    non_blocking: bool,
    dev: &Device,
    peer: Option<Device>,
    bytes: usize,
    warmup: usize,
    runs: usize,
) -> tensorguard::Result<(f64, f64)> {
    let n = bytes / 4;
    let opts = CopyOpts {
        non_blocking,
        copy: false,
    };
    let host = Device::Cpu;
    let sync = |d: &Device| device::synchronize(d);
    match kind {
        Kind::Memcpy => Err(Error::Device(
            "bench copy: internal error: memcpy is not a device copy.".into(),
        )),
        Kind::H2dPageable | Kind::H2dPinned => {
            let mut src = Tensor::ones([n], DType::F32, &host)?;
            if kind == Kind::H2dPinned {
                src = src.pin_memory()?;
            }
            if non_blocking {
                time_case(warmup, runs, || {
                    let out = src.to_with(dev, opts)?;
                    sync(dev)?;
                    Ok(out)
                })
            } else {
                let dst = Tensor::empty([n], DType::F32, dev)?;
                time_case(warmup, runs, || {
                    dst.copy_(&src)?;
                    sync(dev)
                })
            }
        }
        Kind::D2hPageable | Kind::D2hPinned => {
            let src = Tensor::ones([n], DType::F32, dev)?;
            if kind == Kind::D2hPinned && non_blocking {
                time_case(warmup, runs, || {
                    let out = src.to_with(&host, opts)?;
                    sync(dev)?;
                    Ok(out)
                })
            } else {
                let dst = if kind == Kind::D2hPinned {
                    Tensor::empty_pinned([n], DType::F32)?
                } else {
                    Tensor::empty([n], DType::F32, &host)?
                };
                time_case(warmup, runs, || {
                    dst.copy_(&src)?;
                    sync(dev)
                })
            }
        }
        Kind::D2d => {
            let Some(peer) = peer else {
                return Err(Error::Device(
                    "bench copy: internal error: d2d without a second device.".into(),
                ));
            };
            let src = Tensor::ones([n], DType::F32, dev)?;
            if non_blocking {
                time_case(warmup, runs, || {
                    let out = src.to_with(&peer, opts)?;
                    sync(&peer)?;
                    Ok(out)
                })
            } else {
                let dst = Tensor::empty([n], DType::F32, &peer)?;
                time_case(warmup, runs, || {
                    dst.copy_(&src)?;
                    sync(&peer)
                })
            }
        }
        Kind::Clone => {
            let src = Tensor::ones([n], DType::F32, dev)?;
            time_case(warmup, runs, || {
                let out = src.clone()?;
                sync(dev)?;
                Ok(out)
            })
        }
    }
}

/// A device's kind as a word.
trait KindName {
    fn kind_name(&self) -> &'static str;
}

impl KindName for Device {
    fn kind_name(&self) -> &'static str {
        match self.kind() {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Emulated => "emulated",
            DeviceKind::Cuda => "CUDA",
        }
    }
}
