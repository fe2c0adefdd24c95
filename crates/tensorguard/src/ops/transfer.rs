//! Copies between the host and devices: `to`, `to_with`,
//! `to_device_and_dtype`, `cpu`, cross-device `copy_`, `pin_memory`.
//!
//! One path serves them all ([`transfer_into`]): a copy kernel (strides and
//! dtype cast in one pass) queued on the current stream of the device doing
//! the work, owning the storages it reads and writes. What blocks follows
//! CUDA (see the table in [`CopyOpts`]): a pageable host side is copied
//! synchronously; a pinned host side and device → device copies can be
//! queued. Host ops on a host storage that a queued copy still uses wait for
//! it (a write waits for the copy's read; a read waits for its write).

use std::panic::Location;

use super::inplace::check_inplace_target;
use super::Kernel;
use crate::autograd::{self, formulas};
use crate::device::copy::{CopyEnd, CopyJob};
use crate::device::current_stream_id;
use crate::device::registry::{backend, stream_wait_event};
use crate::device::Storage;
use crate::device_id::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::alloc::Shared;
use crate::shape::{broadcast_shapes, Layout};
use crate::tensor::Tensor;
use crate::transfer::{self, CopyOpts, Direction, HostCopy, RepeatPolicy, SyncScope};

impl Tensor {
    /// This tensor on `device`, usable at once: `self` itself (an alias)
    /// when it is already there, as in PyTorch, otherwise a contiguous copy.
    /// The copy is counted by the [transfer ledger](crate::transfer).
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::arange(0, 3, &Device::Cpu).unwrap();
    /// let d = t.to(&Device::Emulated(0)).unwrap();
    /// assert_eq!(d.device(), Device::Emulated(0));
    /// assert_eq!(d.to(&Device::Cpu).unwrap().to_vec::<i64>().unwrap(), vec![0, 1, 2]);
    /// assert!(t.to(&Device::Cpu).unwrap().is_same(&t));
    /// ```
    #[track_caller]
    pub fn to(&self, device: &Device) -> Result<Tensor> {
        self.to_impl(
            device,
            self.dtype(),
            CopyOpts::default(),
            Location::caller(),
        )
    }

    /// [`to`](Tensor::to) with options:
    ///
    /// | source → dest | `non_blocking` | what happens |
    /// |---|---|---|
    /// | pageable host → device | either | synchronous (as in CUDA) |
    /// | pinned host → device | true | queued on the current stream; writes to the source wait for it |
    /// | device → host | true | queued; the result is pinned and its first host read waits |
    /// | device → device | either | queued on the source's current stream, ordered with the destination's |
    ///
    /// ```
    /// use tensorguard::transfer::CopyOpts;
    /// use tensorguard::{Device, DType, Tensor};
    /// # fn main() -> tensorguard::Result<()> {
    /// let dev = Device::Emulated(0);
    /// let src = Tensor::ones([4], DType::F32, &Device::Cpu)?.pin_memory()?;
    /// let d = src.to_with(&dev, CopyOpts { non_blocking: true, ..Default::default() })?;
    /// src.add_(1.0)?; // waits for the queued copy: `d` keeps the old values
    /// assert_eq!(d.to_vec::<f32>()?, vec![1.0; 4]);
    /// let back = d.to_with(&Device::Cpu, CopyOpts { non_blocking: true, ..Default::default() })?;
    /// assert!(back.is_pinned());
    /// assert_eq!(back.to_vec::<f32>()?, vec![1.0; 4]); // waits for the copy
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn to_with(&self, device: &Device, opts: CopyOpts) -> Result<Tensor> {
        self.to_impl(device, self.dtype(), opts, Location::caller())
    }

    /// Move to `device` and cast to `dtype` in one pass (one copy kernel
    /// reads the source and writes the converted result on the device). An
    /// alias when nothing changes and `opts.copy` is false.
    ///
    /// ```
    /// use tensorguard::transfer::CopyOpts;
    /// use tensorguard::{Device, DType, Tensor};
    /// let t = Tensor::arange(0, 3, &Device::Cpu).unwrap();
    /// let d = t.to_device_and_dtype(&Device::Emulated(0), DType::F16, CopyOpts::default()).unwrap();
    /// assert_eq!((d.device(), d.dtype()), (Device::Emulated(0), DType::F16));
    /// assert_eq!(d.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn to_device_and_dtype(
        &self,
        device: &Device,
        dtype: DType,
        opts: CopyOpts,
    ) -> Result<Tensor> {
        self.to_impl(device, dtype, opts, Location::caller())
    }

    /// This tensor in host memory (`to(&Device::Cpu)`).
    #[track_caller]
    pub fn cpu(&self) -> Result<Tensor> {
        self.to_impl(
            &Device::Cpu,
            self.dtype(),
            CopyOpts::default(),
            Location::caller(),
        )
    }

    fn to_impl(
        &self,
        device: &Device,
        dtype: DType,
        opts: CopyOpts,
        site: &'static Location<'static>,
    ) -> Result<Tensor> {
        if *device == self.device() {
            return if dtype == self.dtype() && !opts.copy {
                Ok(self.alias())
            } else {
                self.copy_to(dtype, site)
            };
        }
        let mut out = if device.is_cpu() && opts.non_blocking {
            // the copy lands after this returns: in pinned memory, as CUDA
            // needs, and every host read of it waits for the copy
            Tensor::uninit_pinned(self.shape(), dtype, site)?
        } else {
            Tensor::uninit(self.shape(), dtype, device, site)?
        };
        transfer_into(&out, self, opts.non_blocking, "to", site)?;
        if dtype.is_float() {
            autograd::record_if_tracking(&mut out, &[self], site, |_| {
                formulas::identity("ToCopyBackward", self)
            });
        }
        Ok(out)
    }

    /// A copy of this host tensor in pinned (page-locked) memory, the kind
    /// asynchronous copies to and from devices need; `self` (an alias) when
    /// it is pinned already, as in PyTorch. Errors for a tensor on a device.
    ///
    /// ```
    /// use tensorguard::{Device, DType, Tensor};
    /// let t = Tensor::ones([2, 3], DType::F32, &Device::Cpu).unwrap();
    /// assert!(!t.is_pinned());
    /// let p = t.pin_memory().unwrap();
    /// assert!(p.is_pinned() && p.pin_memory().unwrap().is_same(&p));
    /// assert_eq!(p.to_vec2::<f32>().unwrap(), t.to_vec2::<f32>().unwrap());
    /// ```
    #[track_caller]
    pub fn pin_memory(&self) -> Result<Tensor> {
        let site = Location::caller();
        if !self.device().is_cpu() {
            return Err(Error::invalid(
                "pin_memory",
                format!(
                    "only host tensors can be pinned, and this one is on {}. Pin the host tensor before copying it to the device, or copy it back with `.cpu()` first.",
                    self.device()
                ),
            ));
        }
        if self.is_pinned() {
            return Ok(self.alias());
        }
        let mut out = Tensor::uninit_pinned(self.shape(), self.dtype(), site)?;
        super::launch(
            &Kernel::Copy,
            &[super::Out {
                t: &out,
                dtype: self.dtype(),
            }],
            &[super::In::new(self, self.dtype())],
            false,
            site,
        )?;
        if self.dtype().is_float() {
            autograd::record_if_tracking(&mut out, &[self], site, |_| {
                formulas::identity("PinMemoryBackward", self)
            });
        }
        Ok(out)
    }

    /// Whether this tensor lives in pinned host memory (a flag tensorguard
    /// keeps for the storage; views of a pinned tensor are pinned too).
    pub fn is_pinned(&self) -> bool {
        self.storage().is_pinned()
    }

    /// An uninitialised tensor in pinned host memory, served by the caching
    /// pinned allocator (see [`memory::host_stats`](crate::memory::host_stats)).
    ///
    /// ```
    /// use tensorguard::{Device, DType, Tensor};
    /// let p = Tensor::empty_pinned([1024], DType::U8).unwrap();
    /// assert!(p.is_pinned() && p.device() == Device::Cpu);
    /// ```
    #[track_caller]
    pub fn empty_pinned(shape: impl Into<crate::Shape>, dtype: DType) -> Result<Tensor> {
        Tensor::uninit_pinned(shape.into().dims(), dtype, Location::caller())
    }

    pub(crate) fn uninit_pinned(
        shape: &[usize],
        dtype: DType,
        site: &'static Location<'static>,
    ) -> Result<Tensor> {
        let bytes = Tensor::bytes_for(shape, dtype)?;
        let storage = Storage::new_pinned(bytes, site)?;
        Ok(Tensor::from_parts(
            storage,
            Layout::contiguous(shape),
            dtype,
            false,
        ))
    }

    /// `copy_` from a tensor on another device: one copy kernel writing
    /// `self` in place, synchronous when the host takes part.
    pub(crate) fn copy_across(&self, src: &Tensor, site: &'static Location<'static>) -> Result<()> {
        let shape = broadcast_shapes("copy_", self.shape(), src.shape())?;
        check_inplace_target("copy_", self, self.dtype(), &shape, &[])?;
        let before = autograd::inplace_begin("copy_", self, &[src], site, false)?;
        transfer_into(self, src, false, "copy_", site)?;
        self.storage().bump_version(site);
        if let Some(before) = before {
            autograd::inplace_finish(self, before, site, formulas::copy_into(src));
        }
        Ok(())
    }
}

/// Copy `src` (another device) into `dst`, broadcasting `src` to `dst`'s
/// shape and casting to `dst`'s dtype: the path of one copy.
///
/// 1. A source that is not one contiguous block of the bytes to move
///    (strided, broadcast, or to be cast on its device) is packed by a copy
///    kernel on its own device into a contiguous temporary.
/// 2. The device side's copy engine moves the bytes (`Backend::copy`, the
///    shape of `cuMemcpyAsync`) on its current stream (the source's for
///    device → device, as PyTorch, after the destination's current stream
///    and before its later work), after the source's pending write.
/// 3. A destination that is not one contiguous block of the source's
///    dtype receives the bytes in a temporary that a copy kernel on the
///    destination's device then writes into it (strides, dtype cast).
///
/// Casts run on the device side (before a copy to the host, after a copy
/// from it), so an asynchronous copy to pinned memory stays asynchronous.
/// It is waited for unless `non_blocking` allows otherwise: a pinned (or
/// no) host side with `non_blocking`, or a device → device copy. Counted in
/// the ledger at `site` as one copy of the bytes moved.
pub(crate) fn transfer_into(
    dst: &Tensor,
    src: &Tensor,
    non_blocking: bool,
    op: &'static str,
    site: &'static Location<'static>,
) -> Result<()> {
    let (sdev, ddev) = (src.device(), dst.device());
    // memory written by a failed kernel is not copied, nor copied into;
    // memory lent to a running closure is not touched (Note [Lent storages])
    Storage::check_usable([&**src.storage(), &**dst.storage()], op)?;
    let (dir, run_dev, host) = match (sdev.is_cpu(), ddev.is_cpu()) {
        (true, false) => (Direction::HostToDevice, ddev, Some(src)),
        (false, true) => (Direction::DeviceToHost, sdev, Some(dst)),
        // on the source's stream, as PyTorch (so `synchronize` of the
        // source's device covers the copy that reads it)
        (false, false) => (Direction::DeviceToDevice, sdev, None),
        (true, true) => {
            return Err(Error::invalid(
                op,
                "internal error: a host-to-host copy reached the transfer path.",
            ))
        }
    };
    let pinned = host.is_some_and(|h| h.is_pinned());
    let blocking = match dir {
        Direction::DeviceToDevice => false,
        _ => !(non_blocking && pinned),
    };
    // a blocking copy with a host side makes the host wait for the device:
    // a synchronisation (refused before anything happens in the sync debug
    // mode's Error setting)
    let mut sync = match (blocking, dir) {
        (true, Direction::HostToDevice | Direction::DeviceToHost) => {
            transfer::open_sync_scope(op, run_dev, site)?
        }
        _ => None,
    };
    let route = Route {
        dir,
        run_dev,
        pinned,
        blocking,
    };
    move_bytes(dst, src, &route, sync.as_mut(), op, site)
}

/// How a copy goes: its direction, the device whose stream runs it,
/// whether its host side is pinned and whether the host waits for it.
#[derive(Clone, Copy)]
struct Route {
    dir: Direction,
    run_dev: Device,
    pinned: bool,
    blocking: bool,
}

/// A host tensor holding the values of `t`, or `None` when `t` itself is
/// readable on the host (the cpu; its queued writes, e.g. a pinned result
/// still being filled, have been waited for). From a device: a host copy by
/// the copy engine, queued on the stream of `t`'s pending write (so it runs
/// after that write without a second wait), then waited for. A read by `op`
/// at the user's `site`: a synchronisation (the sync ledger and debug mode)
/// and a device → host copy (the transfer ledger). A fault of the pending
/// write is returned here.
pub(crate) fn read_to_host(
    t: &Tensor,
    op: &'static str,
    site: &'static Location<'static>,
) -> Result<Option<Tensor>> {
    let device = t.device();
    t.storage().check_not_lent_here(op)?;
    // a read of device memory makes the host wait for the device: the
    // sync debug mode may refuse it before anything happens
    let mut sync = transfer::open_sync_scope(op, device, site)?;
    if device.is_cpu() {
        t.storage().sync_for_host_read(op)?;
        return Ok(None);
    }
    let _on_writer = match t.storage().pending_write() {
        // the copy joins the writer's stream: ordered after the write
        Some((d, s, _)) if d == device => Some(crate::device::stream_guard(device, s)),
        // written by another device (a copy from it): the host waits
        Some(_) => {
            t.storage().sync_for_host_read(op)?;
            None
        }
        None => None,
    };
    let host = Tensor::uninit(t.shape(), t.dtype(), &Device::Cpu, site)?;
    // into pageable memory, waited for
    let route = Route {
        dir: Direction::DeviceToHost,
        run_dev: device,
        pinned: false,
        blocking: true,
    };
    move_bytes(&host, t, &route, sync.as_mut(), op, site)?;
    host.storage().check_poison(op)?;
    Ok(Some(host))
}

// Note [Bookkeeping in the copy's shadow]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A blocking copy's host waits for the device anyway, so the copy's
// bookkeeping runs after the copy is queued and before that wait: the
// transfer ledger's count, the repeated-copy detector's and the sync
// ledger's. There it costs the host nothing it would not spend waiting (on
// emu the stream worker runs the copy meanwhile; on CUDA `cuMemcpyAsync`
// has returned). Before the copy, where each step lengthens the round
// trip, stays only what must: the checks that may refuse the copy (the
// sync debug mode's and the repeat policy's `Error` settings), the ledger
// row the stream adds the copy's time to, and the profiler's range. A copy
// that fails before it is queued is counted in neither the transfer ledger
// nor the detector (the sync ledger still counts a host that waited). With
// Note [Storage's cache lines], the ledger's cost on a blocking 1 KiB copy
// to emu went from 12-16% to 6-7% (`cargo run --release -p tensorguard
// --example ledger_cost`); Note [Copy time after completion] in
// `device/copy.rs` takes the rest below 5%.

/// Steps 1 to 3 of [`transfer_into`], once the direction, the device doing
/// the work and whether to block are known. `sync` is the host's
/// synchronisation for a blocking copy, counted once the copy is queued.
fn move_bytes(
    dst: &Tensor,
    src: &Tensor,
    route: &Route,
    sync: Option<&mut SyncScope>,
    op: &'static str,
    site: &'static Location<'static>,
) -> Result<()> {
    let Route {
        dir,
        run_dev,
        pinned,
        blocking,
    } = *route;
    let (sdev, ddev) = (src.device(), dst.device());
    // the dtype the bytes travel in: cast on the device side
    let wire = if ddev.is_cpu() {
        dst.dtype()
    } else {
        src.dtype()
    };
    let bytes = dst.numel() * wire.size_in_bytes();
    // what is counted once the copy is queued: Note [Bookkeeping in the copy's shadow]
    let policy = transfer::repeat_policy();
    let noted =
        dir == Direction::HostToDevice && policy != RepeatPolicy::Off && transfer::enabled();
    let mut repeat = noted.then(|| HostCopy {
        op,
        history: &src.storage().copies,
        storage: src.storage().id(),
        version: src.version(),
        offset: src.storage_offset(),
        numel: src.numel(),
        bytes,
        device: ddev,
        site,
    });
    if policy == RepeatPolicy::Error {
        // may refuse the copy: before it
        if let Some(c) = repeat.take() {
            transfer::check_repeat(c, policy)?;
        }
    }
    let acct = transfer::account(op, sdev, ddev, bytes, pinned, blocking, site);
    let counted = &acct;
    let shadow = move || {
        counted.count(bytes);
        if let Some(s) = sync {
            s.count();
        }
        // `policy` is not `Error` here: this cannot fail
        repeat.map_or(Ok(()), |c| transfer::check_repeat(c, policy))
    };
    if bytes == 0 {
        return shadow();
    }
    // 1. the source as one contiguous block of `wire` elements
    // (no alias when a side is used as is: a launch-sized copy would pay
    // for two tensor handles)
    let packed_tmp = if is_block(src, dst.shape(), wire) {
        None
    } else {
        let tmp = if src.is_pinned() && !blocking {
            Tensor::uninit_pinned(dst.shape(), wire, site)?
        } else {
            Tensor::uninit(dst.shape(), wire, &sdev, site)?
        };
        pack(&tmp, src, site)?;
        Some(tmp)
    };
    let packed = packed_tmp.as_ref().unwrap_or(src);
    // 3. (prepared) where the bytes land
    let direct = is_block(dst, dst.shape(), wire);
    let landing_tmp = if direct {
        None
    } else {
        Some(Tensor::uninit(dst.shape(), wire, &ddev, site)?)
    };
    let landing = landing_tmp.as_ref().unwrap_or(dst);
    // 2. the copy
    let b = backend(&run_dev)?;
    let stream = current_stream_id(&run_dev);
    // Work the copy depends on: the source's pending write on another
    // device (its result, or a pinned result still being filled) is waited
    // for by the copy's stream, not by the host; pending uses of a host
    // destination are waited for on the host.
    // (A device tensor written on another stream of the same device is
    // ordered by the user, as in PyTorch; a host source is always ordered.)
    if let Some((d, s, seq)) = packed.storage().pending_write() {
        if d != run_dev || (packed.device().is_cpu() && s != stream) {
            stream_wait_event(b, stream, &d, s, seq)?;
        }
    }
    if ddev.is_cpu() {
        // a host destination a queued copy still reads: Note [Pinned-source guard]
        landing.storage().sync_for_host_write(op)?;
    } else if ddev != run_dev {
        // device -> device: the copy runs after the destination's current
        // stream's queued work (which may still use the destination)
        let dst_stream = current_stream_id(&ddev);
        let seq = backend(&ddev)?.record_event(dst_stream);
        stream_wait_event(b, stream, &ddev, dst_stream, seq)?;
    }
    // the copy's stream locks host memory too: a host storage's lock is
    // shared before the copy is queued (Note [Biased lock] in `memory/alloc/biased.rs`)
    landing.storage().data.share();
    packed.storage().data.share();
    let esize = wire.size_in_bytes();
    let job = CopyJob {
        dst: CopyEnd {
            storage: Shared::clone(landing.storage()),
            offset: landing.storage_offset() * esize,
        },
        src: CopyEnd {
            storage: Shared::clone(packed.storage()),
            offset: packed.storage_offset() * esize,
        },
        bytes,
        op,
        site,
        prof: acct.prof.as_ref().and_then(|p| p.device_timing(stream)),
        done: acct.cell,
    };
    match b.copy(stream, job)? {
        Some(seq) => {
            landing.storage().record_use(run_dev, stream, seq, true);
            packed.storage().record_use(run_dev, stream, seq, false);
            if !ddev.is_cpu() && ddev != run_dev {
                // and later work on the destination's current stream after it
                stream_wait_event(
                    backend(&ddev)?,
                    current_stream_id(&ddev),
                    &run_dev,
                    stream,
                    seq,
                )?;
            }
            shadow()?;
            if blocking || crate::device::launch_blocking() {
                b.event_synchronize(stream, seq)?;
            }
        }
        None => shadow()?,
    }
    // 3. into a strided (or other-dtype) destination, on its device
    if !direct {
        pack(dst, landing, site)?;
    }
    Ok(())
}

/// Whether `t` is one contiguous block holding `shape` in `dtype` (no
/// broadcast, no cast, no strides): the copy engine can move it as is.
fn is_block(t: &Tensor, shape: &[usize], dtype: DType) -> bool {
    t.dtype() == dtype && t.shape() == shape && t.is_contiguous()
}

/// Copy `src` into `dst` on their (one) device with a copy kernel:
/// strides, broadcast and dtype cast in one pass.
/// `dst` may be the caller's destination: written as an existing tensor.
fn pack(dst: &Tensor, src: &Tensor, site: &'static Location<'static>) -> Result<()> {
    super::launch_into(
        &Kernel::Copy,
        &[super::Out {
            t: dst,
            dtype: dst.dtype(),
        }],
        &[super::In::bcast(src, src.dtype(), dst.shape())],
        site,
    )
}
