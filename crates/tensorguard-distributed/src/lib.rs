//! Data-parallel training for tensorguard, on a proven communication
//! engine (PyTorch's `torch.distributed` and `DistributedDataParallel`).
//!
//! - [`ProcessGroup`]: `all_reduce_` (sum, avg, max, min), `broadcast_`,
//!   `all_gather`, `reduce_scatter` and `barrier` on tensors of every dtype
//!   and device, in place, each also `_async` with a [`Work`] to wait for.
//!   With the `mpi` feature and under `mpirun -np N` it runs on MPI
//!   (rsmpi over the system's MPICH or OpenMPI); started alone, it is the
//!   world of one process.
//! - [`DistributedDataParallel`]: parameters broadcast from rank 0 and
//!   checked across ranks at wrap time, gradients averaged in buckets that
//!   are reduced while backward runs, `no_sync` for gradient accumulation.
//! - Faults explain themselves: a collective that does not complete within
//!   the group's timeout fails with an error naming the collective and the
//!   ranks that did not answer; ranks running different collectives (or
//!   tensors of different sizes) are an error naming both, not a hang.
//!
//! Pair it with [`tensorguard_nn::data::DistributedSampler`] so each rank
//! reads its own shard of the data.
//!
//! ```
//! use tensorguard::{Device, DType, Tensor};
//! use tensorguard_distributed::{ProcessGroup, ReduceOp};
//! # fn main() -> tensorguard::Result<()> {
//! let pg = ProcessGroup::from_env()?;
//! let t = Tensor::ones([3], DType::F32, &Device::Cpu)?;
//! let work = pg.all_reduce_async(&t, ReduceOp::Avg)?; // runs on the engine's thread
//! work.wait()?;
//! assert_eq!(t.to_vec::<f32>()?, vec![1.0; 3]);
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod ddp;
mod engine;
mod env;
mod group;
#[cfg(feature = "mpi")]
mod mpi_engine;
mod nccl;
mod wire;

pub use ddp::{DdpOptions, DistributedDataParallel};
pub use env::launched_by_mpi;
pub use group::{Backend, GroupOptions, ProcessGroup, ReduceOp, Work};
pub use tensorguard;
