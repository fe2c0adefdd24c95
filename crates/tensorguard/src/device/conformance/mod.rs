//! Backend conformance: what every [`Backend`] implementation must do,
//! written once as generic cases over a backend and its device, and run for
//! each implementation (`cpu`, `emu`, and `cuda` once it exists: skipped
//! with the reason printed until then).
//!
//! The cases drive the trait directly (`launch`, `copy`, `host_fn`, events,
//! `synchronize`, `defer_free`/`reclaim`) with storages built by the crate,
//! and assert real values: what a kernel or a copy wrote, which operands are
//! still alive, what `memory::allocated` says. Nothing is timed. Where an
//! ordering must be observable, a stream is held by a [`Gate`] (host work
//! that waits until the test opens it) or slowed by a short sleeping host
//! function; a backend that runs work inline passes the same cases, whose
//! assertions are written for "ran inline" (`Ok(None)`) and "queued"
//! (`Ok(Some(event))`) alike.
//!
//! In the library's unit-test binary the suite owns `emu:1` (no other unit
//! test allocates on it), so `memory::allocated` is exact there; `emu:0` is
//! its peer for copies and waits across devices. The cases run one at a
//! time.

mod cases;

use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;

use super::backend::{Backend, Launch};
use super::copy::{CopyEnd, CopyJob};
use super::kernel::{Arg, BinaryOp, Kernel};
use super::registry::{backend, emulated_devices};
use super::Storage;
use crate::device_id::{Device, StreamId};
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::memory::alloc::Shared;
use crate::shape::Layout;

/// One device under test: its id and its backend.
#[derive(Clone, Copy)]
pub(super) struct Dev {
    pub device: Device,
    pub b: &'static dyn Backend,
}

/// What a case runs on: the device under test, a second device (copies and
/// waits across devices), and whether the suite alone uses the device under
/// test (then `memory::allocated` is exact).
pub(super) struct Ctx {
    pub dev: Dev,
    pub peer: Dev,
    pub exclusive: bool,
}

/// The backend implementations the suite is instantiated for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Target {
    Cpu,
    Emu,
    Cuda,
}

fn dev(device: Device) -> Result<Dev> {
    Ok(Dev {
        device,
        b: backend(&device)?,
    })
}

/// The context of `target`, or why it cannot run in this build.
fn context(target: Target) -> std::result::Result<Ctx, String> {
    let emu0 = || dev(Device::Emulated(0));
    match target {
        Target::Cpu => Ok(Ctx {
            dev: dev(Device::Cpu).map_err(|e| e.to_string())?,
            // the cpu waits for and copies to a device when one exists
            peer: emu0()
                .or_else(|_| dev(Device::Cpu))
                .map_err(|e| e.to_string())?,
            exclusive: false,
        }),
        Target::Emu => {
            let n = emulated_devices().map_err(|e| e.to_string())?.len();
            let own = Device::Emulated(if n >= 2 { 1 } else { 0 });
            Ok(Ctx {
                dev: dev(own).map_err(|e| e.to_string())?,
                peer: emu0().map_err(|e| e.to_string())?,
                exclusive: n >= 2,
            })
        }
        Target::Cuda => {
            let d = dev(Device::Cuda(0)).map_err(|e| e.to_string())?;
            let peer = dev(Device::Cuda(1))
                .or_else(|_| dev(Device::Cpu))
                .map_err(|e| e.to_string())?;
            Ok(Ctx {
                dev: d,
                peer,
                exclusive: true,
            })
        }
    }
}

/// Run one case on `target`: one case at a time, then the device under
/// test is synchronised and, when the suite owns it, must hold no memory.
pub(super) fn run(target: Target, case: fn(&Ctx) -> Result<()>) -> Result<()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let ctx = match context(target) {
        Ok(c) => c,
        Err(why) if matches!(target, Target::Cuda) => {
            println!("skipped: {why}");
            return Ok(());
        }
        Err(why) => return Err(Error::Device(why)),
    };
    let _one = ONE_AT_A_TIME.lock();
    if matches!(target, Target::Cuda) {
        load_kernels(ctx.dev)?;
    }
    // start drained: work a failed case left queued is not this case's (its
    // fault, if any, was that case's failure)
    let _ = ctx.dev.b.synchronize();
    case(&ctx)?;
    ctx.dev.b.synchronize()?;
    if ctx.exclusive {
        assert_eq!(
            crate::memory::allocated(&ctx.dev.device),
            0,
            "live memory left on {} after a conformance case:\n{}",
            ctx.dev.device,
            crate::memory::summary(&ctx.dev.device)
        );
    }
    Ok(())
}

// Note [Kernels load before a gate]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On CUDA a kernel is loaded at its first use, and loading may wait for the
// work already queued on the GPU (the driver loads lazily by default since
// CUDA 12.2, and a load can synchronise the context). A case's first launch
// of a kernel behind a closed [`Gate`] would then wait for the gate, which
// only the waiting thread opens. So the suite launches every kernel that a
// case queues behind a gate once, before the first CUDA case. The same
// holds for a device-to-host copy into pageable memory, which returns only
// once it ran: behind a gate, the cases copy into pinned memory.

/// Load the kernels the cases queue behind a gate (Note [Kernels load
/// before a gate]); once per process.
fn load_kernels(d: Dev) -> Result<()> {
    static LOADED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if LOADED.get().is_some() {
        return Ok(());
    }
    let s = d.b.new_stream()?;
    let x = Operand::f32(alloc(&d.device, 16)?, 4);
    launch(d.b, s, &fill(1.0), &[&x], &[])?;
    for op in [BinaryOp::Add, BinaryOp::Mul] {
        launch(d.b, s, &scalar(op, 2.0), &[&x], &[&x])?;
    }
    drop(x);
    d.b.synchronize()?;
    let _ = LOADED.set(());
    Ok(())
}

macro_rules! conformance_cases {
    ($($case:ident),* $(,)?) => {
        mod cpu {
            $( #[test] fn $case() -> crate::error::Result<()> {
                super::run(super::Target::Cpu, super::cases::$case)
            } )*
        }
        mod emu {
            $( #[test] fn $case() -> crate::error::Result<()> {
                super::run(super::Target::Emu, super::cases::$case)
            } )*
        }
        mod cuda {
            $( #[test] fn $case() -> crate::error::Result<()> {
                super::run(super::Target::Cuda, super::cases::$case)
            } )*
        }
    };
}

conformance_cases!(
    in_order_on_one_stream,
    launch_inline_or_queued_and_its_event,
    idle_stream_event_is_complete,
    copies_at_byte_offsets,
    copies_between_devices,
    queued_kernel_keeps_operands_alive,
    queued_copy_keeps_operands_alive,
    queued_peer_copy_keeps_operands_alive,
    stream_wait_event_orders_two_streams,
    stream_wait_event_orders_two_devices,
    kernel_fault_surfaces_once_and_poisons,
    host_fn_fault_surfaces_once,
    two_faults_surface_one_per_synchronize,
    defer_free_waits_for_its_events,
    synchronize_then_allocated_is_exact,
);

// ---------------------------------------------------------------------------
// Operands and requests
// ---------------------------------------------------------------------------

/// A kernel operand: a storage, its layout and dtype.
pub(super) struct Operand {
    pub storage: Shared<Storage>,
    pub layout: Layout,
    pub dtype: DType,
}

impl Operand {
    /// `n` contiguous f32 elements of `storage`.
    pub(super) fn f32(storage: Shared<Storage>, n: usize) -> Operand {
        Operand {
            storage,
            layout: Layout::contiguous(&[n]),
            dtype: DType::F32,
        }
    }

    fn arg(&self) -> Arg<'_> {
        Arg {
            storage: &self.storage,
            layout: &self.layout,
            tdtype: self.dtype,
            want: self.dtype,
            bshape: None,
            fresh: false,
        }
    }
}

/// A fresh storage of `bytes` on `device` (contents unspecified).
#[track_caller]
pub(super) fn alloc(device: &Device, bytes: usize) -> Result<Shared<Storage>> {
    Storage::new(device, bytes, Location::caller())
}

/// A host storage holding `bytes`.
#[track_caller]
pub(super) fn host(bytes: &[u8]) -> Result<Shared<Storage>> {
    let s = alloc(&Device::Cpu, bytes.len())?;
    s.data.write().host_bytes_mut()?.copy_from_slice(bytes);
    Ok(s)
}

/// A pinned host storage holding `bytes`: the target of a device-to-host
/// copy queued behind a [`Gate`] (Note [Kernels load before a gate]).
#[track_caller]
pub(super) fn pinned(bytes: &[u8]) -> Result<Shared<Storage>> {
    let s = Storage::new_pinned(bytes.len(), Location::caller())?;
    s.data.write().host_bytes_mut()?.copy_from_slice(bytes);
    Ok(s)
}

/// The bytes of a host storage.
pub(super) fn host_bytes(s: &Storage) -> Result<Vec<u8>> {
    Ok(s.data.read().host_bytes()?.to_vec())
}

/// Queue (or run) a copy of `bytes` bytes from `src` at `soff` to `dst` at
/// `doff` on `stream` of `b`.
#[track_caller]
pub(super) fn copy(
    b: &dyn Backend,
    stream: StreamId,
    dst: (&Shared<Storage>, usize),
    src: (&Shared<Storage>, usize),
    bytes: usize,
) -> Result<Option<u64>> {
    b.copy(
        stream,
        CopyJob {
            dst: CopyEnd {
                storage: Shared::clone(dst.0),
                offset: dst.1,
            },
            src: CopyEnd {
                storage: Shared::clone(src.0),
                offset: src.1,
            },
            bytes,
            op: "conformance_copy",
            site: Location::caller(),
            prof: None,
            done: None,
        },
    )
}

/// Launch `kernel` on `stream` of `b`.
#[track_caller]
pub(super) fn launch(
    b: &dyn Backend,
    stream: StreamId,
    kernel: &Kernel,
    outs: &[&Operand],
    ins: &[&Operand],
) -> Result<Option<u64>> {
    let o: SmallVec<[Arg<'_>; 2]> = outs.iter().map(|x| x.arg()).collect();
    let i: SmallVec<[Arg<'_>; 3]> = ins.iter().map(|x| x.arg()).collect();
    b.launch(
        stream,
        Launch {
            kernel,
            outs: &o,
            ins: &i,
            op: kernel.name(),
            site: Location::caller(),
            timing: &|_| None,
        },
    )
}

/// Wait for what a launch or copy returned: nothing when it ran inline,
/// its event when it was queued.
pub(super) fn wait(b: &dyn Backend, stream: StreamId, r: Option<u64>) -> Result<()> {
    match r {
        Some(seq) => b.event_synchronize(stream, seq),
        None => Ok(()),
    }
}

/// A storage of `d` holding `bytes`, written by a copy on `stream`.
pub(super) fn upload(d: Dev, stream: StreamId, bytes: &[u8]) -> Result<Shared<Storage>> {
    let dst = alloc(&d.device, bytes.len())?;
    let src = host(bytes)?;
    let r = copy(d.b, stream, (&dst, 0), (&src, 0), bytes.len())?;
    wait(d.b, stream, r)?;
    Ok(dst)
}

/// The first `len` bytes of a storage of `d`, read by a copy on `stream`
/// (after the work queued there before it).
pub(super) fn download(
    d: Dev,
    stream: StreamId,
    s: &Shared<Storage>,
    len: usize,
) -> Result<Vec<u8>> {
    let out = host(&vec![0; len])?;
    let r = copy(d.b, stream, (&out, 0), (s, 0), len)?;
    wait(d.b, stream, r)?;
    host_bytes(&out)
}

pub(super) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

pub(super) fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(super) fn fill(v: f64) -> Kernel {
    Kernel::Fill(Scalar::Float(v))
}

pub(super) fn scalar(op: BinaryOp, v: f64) -> Kernel {
    Kernel::BinaryScalar {
        op,
        scalar: Scalar::Float(v),
        reversed: false,
    }
}

/// Host work that sleeps briefly on `stream`: work queued after it runs
/// late, so a missing wait shows as wrong values (not a timing assertion:
/// the values are right whatever the timing when the backend is right).
pub(super) fn slow(b: &dyn Backend, stream: StreamId) -> Result<u64> {
    b.host_fn(
        stream,
        "conformance_sleep",
        Location::caller(),
        Box::new(|| {
            std::thread::sleep(Duration::from_millis(20));
            Ok(())
        }),
    )
}

/// How long a [`Gate`] holds its stream at most.
const GATE_LIMIT: Duration = Duration::from_secs(30);

/// Host work that holds a stream until the test opens it (or drops it),
/// so that what is queued behind it has deterministically not run yet.
/// On a backend that runs host work inline on the calling thread it does
/// not wait (it would wait for itself).
pub(super) struct Gate {
    open: Arc<(Mutex<bool>, Condvar)>,
}

impl Gate {
    /// Close `stream` of `b` until the gate opens; returns the gate's event.
    pub(super) fn close(b: &dyn Backend, stream: StreamId) -> Result<(Gate, u64)> {
        let open = Arc::new((Mutex::new(false), Condvar::new()));
        let held = Arc::clone(&open);
        let issuer = std::thread::current().id();
        let seq = b.host_fn(
            stream,
            "conformance_gate",
            Location::caller(),
            Box::new(move || {
                if std::thread::current().id() != issuer {
                    // a case that waits for what it queued behind the gate
                    // fails instead of hanging
                    let deadline = std::time::Instant::now() + GATE_LIMIT;
                    let mut g = held.0.lock();
                    while !*g {
                        if held.1.wait_until(&mut g, deadline).timed_out() {
                            return Err(Error::Device(format!(
                                "conformance gate: not opened within {GATE_LIMIT:?}; the case waited for work queued behind it (see Note [Kernels load before a gate])"
                            )));
                        }
                    }
                }
                Ok(())
            }),
        )?;
        Ok((Gate { open }, seq))
    }

    /// Let the stream run on.
    pub(super) fn open(&self) {
        *self.open.0.lock() = true;
        self.open.1.notify_all();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // a failed assertion must not leave a stream blocked for good
        self.open();
    }
}
