//! NCCL collectives on `cuda:N` tensors (the `nccl` feature): the engine
//! `tensorguard-distributed` runs CUDA tensors on, one process per GPU.
//!
//! A collective is an op like any other: it goes through the one launch
//! path, queued on the device's current stream (so it is ordered after the
//! work that produced its input, and later work waits for it), its storages
//! held until it completed, the written tensor's version bumped. NCCL's
//! library is opened at run time (Note [Finding NCCL] in
//! `device/cuda/nccl.rs`: NVIDIA ships `libnccl.so.2`, not the
//! `libnccl.so` cudarc looks for).
//!
//! Every rank makes its communicator from the same [`NcclId`], which rank 0
//! creates and sends to the others out of band (`tensorguard-distributed`
//! broadcasts it over MPI). NCCL refuses two ranks on one GPU, so a
//! machine with one GPU runs world size 1 only.
//!
//! ```
//! use tensorguard::nccl::{NcclComm, NcclId, ReduceOp};
//! use tensorguard::{Device, DType, Tensor};
//! # fn main() -> tensorguard::Result<()> {
//! // without the `nccl` feature, a GPU or NCCL, this says why and stops
//! let comm = match NcclId::new().and_then(|id| NcclComm::new(&Device::Cuda(0), &id, 0, 1)) {
//!     Ok(c) => c,
//!     Err(e) => { println!("{e}"); return Ok(()) }
//! };
//! let t = Tensor::ones([4], DType::F32, &Device::Cuda(0))?;
//! comm.all_reduce_(&t, ReduceOp::Sum)?; // queued on cuda:0's current stream
//! assert_eq!(t.to_vec::<f32>()?, vec![1.0; 4]); // a world of one
//! # Ok(()) }
//! ```

use std::panic::Location;

use crate::autograd;
#[cfg(feature = "nccl")]
use crate::device::cuda::nccl as ffi;
use crate::device_id::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// How a reduction combines the ranks' values (PyTorch's `ReduceOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (a logical or for `bool`).
    Sum,
    /// The mean over the ranks (floating-point tensors only).
    Avg,
    /// The largest value (or for `bool`).
    Max,
    /// The smallest value (and for `bool`).
    Min,
}

impl std::fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        })
    }
}

/// The id every rank of one communicator is made from (NCCL's
/// `ncclUniqueId`, 128 bytes): rank 0 makes it, the others receive it.
#[derive(Clone, PartialEq, Eq)]
pub struct NcclId([u8; 128]);

impl std::fmt::Debug for NcclId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NcclId(..)")
    }
}

impl NcclId {
    /// A fresh id (`ncclGetUniqueId`; it opens a socket NCCL's bootstrap
    /// listens on). An error without the `nccl` feature or NCCL.
    pub fn new() -> Result<NcclId> {
        #[cfg(feature = "nccl")]
        {
            ffi::unique_id().map(NcclId)
        }
        #[cfg(not(feature = "nccl"))]
        {
            Err(not_built())
        }
    }

    /// The id's bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8; 128] {
        &self.0
    }

    /// The id another rank sent (its 128 bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<NcclId> {
        let id: [u8; 128] = bytes.try_into().map_err(|_| {
            Error::invalid(
                "NcclId::from_bytes",
                format!(
                    "an NCCL id is 128 bytes, but {} were given. Send the whole of `as_bytes()` from rank 0.",
                    bytes.len()
                ),
            )
        })?;
        Ok(NcclId(id))
    }
}

/// NCCL's library path and version (`"2.27.3"`), or why it cannot be
/// loaded (the places searched and what to do).
pub fn library() -> Result<(String, String)> {
    #[cfg(feature = "nccl")]
    {
        ffi::library()
    }
    #[cfg(not(feature = "nccl"))]
    {
        Err(not_built())
    }
}

#[cfg(not(feature = "nccl"))]
fn not_built() -> Error {
    Error::Device(
        "this build of tensorguard has no NCCL. Build with `--features nccl` (it implies `cuda`; NCCL's libnccl.so.2 is loaded at run time, so the build needs neither NCCL nor a GPU).".to_string(),
    )
}

#[cfg(feature = "nccl")]
type Inner = std::sync::Arc<ffi::Comm>;
/// Without the feature no communicator can exist.
#[cfg(not(feature = "nccl"))]
#[derive(Clone)]
enum Inner {}

/// One rank's NCCL communicator on one GPU; cloning gives another handle.
/// Dropping the last handle destroys it.
#[derive(Clone)]
pub struct NcclComm {
    inner: Inner,
}

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NcclComm(rank {} of {} on {})",
            self.rank(),
            self.world_size(),
            self.device()
        )
    }
}

impl NcclComm {
    /// Join the communicator of `id` as `rank` of `world_size` on `device`
    /// (a `cuda:N`). Blocks until every rank has joined.
    pub fn new(device: &Device, id: &NcclId, rank: usize, world_size: usize) -> Result<NcclComm> {
        let Device::Cuda(index) = *device else {
            return Err(Error::invalid(
                "NcclComm::new",
                format!("NCCL runs on cuda devices, not on {device}. Collectives of cpu and emu tensors run on MPI (tensorguard-distributed)."),
            ));
        };
        #[cfg(feature = "nccl")]
        {
            ffi::Comm::new(index, &id.0, rank, world_size).map(|c| NcclComm {
                inner: std::sync::Arc::new(c),
            })
        }
        #[cfg(not(feature = "nccl"))]
        {
            let _ = (index, id, rank, world_size);
            Err(not_built())
        }
    }

    /// The GPU the communicator runs on.
    pub fn device(&self) -> Device {
        #[cfg(feature = "nccl")]
        return self.inner.device();
        #[cfg(not(feature = "nccl"))]
        match self.inner {}
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        #[cfg(feature = "nccl")]
        return self.inner.rank();
        #[cfg(not(feature = "nccl"))]
        match self.inner {}
    }

    /// How many ranks the communicator has.
    pub fn world_size(&self) -> usize {
        #[cfg(feature = "nccl")]
        return self.inner.world_size();
        #[cfg(not(feature = "nccl"))]
        match self.inner {}
    }

    /// The fault NCCL found on its own threads (a peer that left, a
    /// network error) as an error; `Ok` while there is none. Poll it while
    /// waiting for a collective that does not complete.
    pub fn check(&self) -> Result<()> {
        #[cfg(feature = "nccl")]
        return self.inner.async_error("NcclComm::check");
        #[cfg(not(feature = "nccl"))]
        match self.inner {}
    }

    /// Abort the communicator (after a timeout): collectives stuck on a
    /// peer return, and every later use is an error.
    pub fn abort(&self) {
        #[cfg(feature = "nccl")]
        self.inner.abort();
        #[cfg(not(feature = "nccl"))]
        match self.inner {}
    }

    /// Reduce `t` over every rank, in place (`ncclAllReduce`).
    #[track_caller]
    pub fn all_reduce_(&self, t: &Tensor, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce_";
        let site = Location::caller();
        let red = self.reduction(OP, t, op, site)?;
        self.run(OP, Coll::AllReduce(red), t, t, t.numel(), true, site)
    }

    /// Copy rank `root`'s `t` into every rank's `t` (`ncclBroadcast`).
    #[track_caller]
    pub fn broadcast_(&self, t: &Tensor, root: usize) -> Result<()> {
        const OP: &str = "broadcast_";
        let site = Location::caller();
        if root >= self.world_size() {
            return Err(Error::invalid(
                OP,
                format!(
                    "the root rank {root} is not in the communicator (ranks 0..{}). Pass a rank below the world size.",
                    self.world_size()
                ),
            ));
        }
        self.operand(OP, t, site)?;
        self.run(OP, Coll::Broadcast(root), t, t, t.numel(), true, site)
    }

    /// Every rank's `t` stacked in rank order: a new tensor of shape
    /// `[world_size, ..t.shape()]` on `t`'s GPU (`ncclAllGather`).
    #[track_caller]
    pub fn all_gather(&self, t: &Tensor) -> Result<Tensor> {
        const OP: &str = "all_gather";
        let site = Location::caller();
        self.operand(OP, t, site)?;
        let mut shape = vec![self.world_size()];
        shape.extend_from_slice(t.shape());
        let out = Tensor::empty(shape, t.dtype(), &t.device())?;
        self.run(OP, Coll::AllGather, &out, t, t.numel(), false, site)?;
        Ok(out)
    }

    /// Reduce `t` over every rank and return this rank's block of the
    /// result along dimension 0, whose size must be a multiple of the
    /// world size (`ncclReduceScatter`).
    #[track_caller]
    pub fn reduce_scatter(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        const OP: &str = "reduce_scatter";
        let site = Location::caller();
        let n = self.world_size();
        let first = t.shape().first().copied().unwrap_or(0);
        if t.ndim() == 0 || first % n != 0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "the input of shape {:?} cannot be split into {n} equal blocks along dimension 0 (one per rank). Pad dimension 0 to a multiple of {n}.",
                    t.shape()
                ),
            ));
        }
        let red = self.reduction(OP, t, op, site)?;
        let mut shape = t.shape().to_vec();
        shape[0] /= n;
        let out = Tensor::empty(shape, t.dtype(), &t.device())?;
        self.run(
            OP,
            Coll::ReduceScatter(red),
            &out,
            t,
            out.numel(),
            false,
            site,
        )?;
        Ok(out)
    }

    /// The checks every operand passes: on this GPU, contiguous, without
    /// autograd history to cut.
    fn operand(
        &self,
        op: &'static str,
        t: &Tensor,
        site: &'static Location<'static>,
    ) -> Result<()> {
        if t.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                arg: "tensor",
                expected: self.device(),
                found: t.device(),
                location: site,
            });
        }
        if !t.is_contiguous() {
            return Err(Error::invalid(
                op,
                format!(
                    "NCCL reads and writes contiguous memory, but the tensor of shape {:?} has strides {:?}. Pass `t.contiguous()?` (and copy the result back), as PyTorch requires too.",
                    t.shape(),
                    t.stride()
                ),
            ));
        }
        if t.is_requires_grad() && autograd::is_grad_enabled() {
            return Err(Error::invalid(
                op,
                "the tensor requires grad, and a collective is not differentiable: it would cut its history. Run it on `t.detach()` or under `no_grad` (DDP reduces gradients, which need no history).".to_string(),
            ));
        }
        Ok(())
    }

    /// NCCL's reduction for `op` on `t`'s dtype (bool: or, and), after the
    /// operand checks.
    fn reduction(
        &self,
        name: &'static str,
        t: &Tensor,
        op: ReduceOp,
        site: &'static Location<'static>,
    ) -> Result<Red> {
        self.operand(name, t, site)?;
        if op == ReduceOp::Avg && !t.dtype().is_float() {
            return Err(Error::invalid(
                name,
                format!(
                    "ReduceOp::Avg of a {} tensor would round the mean to an integer; Avg is for floating-point tensors (as in PyTorch's NCCL groups). Reduce with ReduceOp::Sum and divide by the world size yourself, or cast to f32 first.",
                    t.dtype()
                ),
            ));
        }
        Ok(match (op, t.dtype()) {
            (ReduceOp::Sum | ReduceOp::Max, DType::Bool) => Red::Max,
            (ReduceOp::Sum, _) => Red::Sum,
            (ReduceOp::Avg, _) => Red::Avg,
            (ReduceOp::Max, _) => Red::Max,
            (ReduceOp::Min, _) => Red::Min,
        })
    }

    /// Launch the collective writing `out` from `input` (`count` elements
    /// per rank) through the one launch path; `inplace`: `out` is the
    /// user's tensor (its version is bumped), else one made here.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        op: &'static str,
        what: Coll,
        out: &Tensor,
        input: &Tensor,
        count: usize,
        inplace: bool,
        site: &'static Location<'static>,
    ) -> Result<()> {
        #[cfg(feature = "nccl")]
        {
            use crate::ops::{launch, In, Kernel, Out};
            use cudarc::nccl::sys::ncclRedOp_t;
            let red = |r: Red| match r {
                Red::Sum => ncclRedOp_t::ncclSum,
                Red::Avg => ncclRedOp_t::ncclAvg,
                Red::Max => ncclRedOp_t::ncclMax,
                Red::Min => ncclRedOp_t::ncclMin,
            };
            let what = match what {
                Coll::AllReduce(r) => ffi::What::AllReduce(red(r)),
                Coll::Broadcast(root) => ffi::What::Broadcast { root },
                Coll::AllGather => ffi::What::AllGather,
                Coll::ReduceScatter(r) => ffi::What::ReduceScatter(red(r)),
            };
            let kernel = Kernel::Native(std::sync::Arc::new(ffi::Call {
                comm: std::sync::Arc::clone(&self.inner),
                what,
                op,
                count,
                dtype: ffi::nccl_dtype(input.dtype()),
            }));
            let dtype = input.dtype();
            launch(
                &kernel,
                &[Out { t: out, dtype }],
                &[In::new(input, dtype)],
                inplace,
                site,
            )
        }
        #[cfg(not(feature = "nccl"))]
        {
            let _ = (op, what, out, input, count, inplace, site);
            match self.inner {}
        }
    }
}

/// NCCL's reductions (bool's sum is max: NCCL has no logical or).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "nccl"), allow(dead_code))]
enum Red {
    Sum,
    Avg,
    Max,
    Min,
}

/// A collective (its NCCL form is built only with the feature).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "nccl"), allow(dead_code))]
enum Coll {
    AllReduce(Red),
    Broadcast(usize),
    AllGather,
    ReduceScatter(Red),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_gpu_or_nccl_every_entry_says_why() {
        assert!(NcclId::from_bytes(&[0; 5])
            .unwrap_err()
            .to_string()
            .contains("128 bytes, but 5"));
        let id = NcclId::from_bytes(&[7; 128]).unwrap();
        assert_eq!(id.as_bytes()[127], 7);
        let e = NcclComm::new(&Device::Cpu, &id, 0, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("NCCL runs on cuda devices, not on cpu"), "{e}");
        if crate::device::cuda_info().is_err() {
            // no GPU: joining a communicator cannot succeed, and says why
            let e = NcclComm::new(&Device::Cuda(0), &id, 0, 1)
                .unwrap_err()
                .to_string();
            assert!(e.ends_with('.') || e.contains("libnccl.so.2"), "{e}");
        }
        if cfg!(not(feature = "nccl")) {
            assert!(library()
                .unwrap_err()
                .to_string()
                .contains("--features nccl"));
            assert!(NcclId::new()
                .unwrap_err()
                .to_string()
                .contains("--features nccl"));
        }
    }

    /// On a GPU with NCCL (the GPU check sets TENSORGUARD_REQUIRE_NCCL):
    /// every collective of a world of one on cuda:0, through the launch
    /// path (stream order, versions, the operand checks).
    #[test]
    fn a_world_of_one_runs_every_collective_on_cuda0() -> Result<()> {
        let dev = Device::Cuda(0);
        if let Err(e) = crate::device::cuda_info() {
            println!("skipped: no GPU here: {e}");
            return Ok(());
        }
        let comm = match NcclId::new().and_then(|id| NcclComm::new(&dev, &id, 0, 1)) {
            Ok(c) => c,
            Err(e) => {
                if std::env::var_os("TENSORGUARD_REQUIRE_NCCL").is_some() {
                    panic!("TENSORGUARD_REQUIRE_NCCL is set but: {e}");
                }
                println!("skipped: no NCCL communicator on cuda:0 here: {e}");
                return Ok(());
            }
        };
        assert_eq!((comm.rank(), comm.world_size(), comm.device()), (0, 1, dev));
        let host = vec![1.0f32, -2.0, 3.0, 4.0];
        let t = Tensor::from_vec(host.clone(), [2, 2], &dev)?;
        // queued work before the collective is ordered before it
        let y = t.mul(2.0)?;
        let v0 = y.version();
        for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
            comm.all_reduce_(&y, op)?;
        }
        assert_eq!(y.to_vec::<f32>()?, vec![2.0, -4.0, 6.0, 8.0]);
        assert_eq!(y.version(), v0 + 4, "each collective writes in place");
        for dtype in DType::ALL {
            let x = t.to_dtype(dtype)?;
            comm.all_reduce_(&x, ReduceOp::Sum)?;
            comm.all_reduce_(&x, ReduceOp::Min)?;
            comm.broadcast_(&x, 0)?;
            assert_eq!(
                x.to_dtype(DType::F64)?.to_vec::<f64>()?,
                t.to_dtype(dtype)?.to_dtype(DType::F64)?.to_vec::<f64>()?,
                "{dtype}"
            );
            let avg = comm.all_reduce_(&x, ReduceOp::Avg);
            assert_eq!(avg.is_ok(), dtype.is_float(), "{dtype}");
        }
        let all = comm.all_gather(&t)?;
        assert_eq!(
            (all.shape(), all.to_vec::<f32>()?),
            (&[1, 2, 2][..], host.clone())
        );
        let part = comm.reduce_scatter(&t, ReduceOp::Sum)?;
        assert_eq!((part.shape(), part.to_vec::<f32>()?), (&[2, 2][..], host));
        let e = comm.broadcast_(&t, 1).unwrap_err().to_string();
        assert!(e.contains("root rank 1"), "{e}");
        let e = comm
            .all_reduce_(&t.t()?, ReduceOp::Sum)
            .unwrap_err()
            .to_string();
        assert!(e.contains("contiguous"), "{e}");
        let cpu = Tensor::zeros([2], DType::F32, &Device::Cpu)?;
        assert!(matches!(
            comm.all_reduce_(&cpu, ReduceOp::Sum),
            Err(Error::DeviceMismatch { .. })
        ));
        let w = Tensor::zeros([2], DType::F32, &dev)?.requires_grad(true)?;
        let e = comm.all_reduce_(&w, ReduceOp::Sum).unwrap_err().to_string();
        assert!(e.contains("not differentiable"), "{e}");
        comm.check()
    }
}
