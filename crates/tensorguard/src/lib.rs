//! # tensorguard
//!
//! A tensor runtime with PyTorch's tensor-memory model — dtypes, views,
//! in-place ops, devices and a caching allocator — that turns PyTorch's
//! classic pitfalls into errors that explain themselves or into things that
//! cannot happen:
//!
//! - **In-place ops are checked and atomic.** Every in-place write bumps a
//!   version counter shared by a tensor and its views and records its call
//!   site; writing into overlapping memory (`expand`) or casting a float
//!   result into an int tensor is an error; and each op holds its storages'
//!   locks, so concurrent `add_`s from many threads never lose updates.
//! - **Aliasing is explicit.** [`Tensor`] does not implement `Clone`:
//!   [`Tensor::clone`] is a deep copy and [`Tensor::alias`] a second handle.
//! - **Errors are values.** Every mistake a caller can make returns an
//!   [`Error`] whose message names the op, the values and a fix.
//!
//! ```
//! use tensorguard::{Device, DType, Tensor};
//! # fn main() -> tensorguard::Result<()> {
//! let dev = Device::Cpu;
//! let x = Tensor::arange(0.0, 6.0, &dev)?.view([2, 3])?;
//! let y = x.mul(2.0)?.add(&Tensor::ones([3], DType::F32, &dev)?)?;
//! assert_eq!(y.sum()?.item::<f32>()?, 36.0);
//!
//! // writes through a view reach the base
//! x.transpose(0, 1)?.add_(1.0)?;
//! assert_eq!(x.to_vec2::<f32>()?, vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]);
//!
//! // an expanded tensor cannot be written in place
//! let e = Tensor::ones([1, 3], DType::F32, &dev)?.expand([2, 3])?;
//! assert!(e.add_(1.0).is_err());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
// `unsafe` lives in `device/` and `memory/` only, each block says why it is sound.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod autocast;
pub mod autograd;
pub mod device;
mod device_id;
mod dtype;
mod error;
mod hooks;
mod ids;
pub mod memory;
pub mod nccl;
mod oom_report;
mod ops;
pub mod profiler;
mod random;
mod shape;
mod tensor;
pub mod transfer;
pub mod units;
pub mod warnings;

pub use device::{Device, DeviceKind};
pub use dtype::{DType, Element, Scalar, DEFAULT_FLOAT};
pub use error::{CudaUnavailable, Error, Result};
pub use ops::Operand;
pub use random::{default_generator, manual_seed, Generator, GeneratorState};
pub use shape::{DimList, Shape, ShapeSpec};
pub use tensor::{SliceRange, Tensor};

/// The names most programs need: `use tensorguard::prelude::*;`.
pub mod prelude {
    pub use crate::{DType, Device, Error, Result, Scalar, Tensor};
}
