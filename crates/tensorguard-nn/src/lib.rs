//! Neural-network building blocks for tensorguard: modules, losses,
//! optimizers, mixed precision and a pinned-memory data loader.
//!
//! Everything here is built on the core crate's public API (re-exported as
//! [`tensorguard`]); fused ops ([`ops`]) use its custom-op extension point
//! ([`tensorguard::autograd::Function`]), without `unsafe` and without
//! editing the core.
//!
//! ```
//! use tensorguard_nn::tensorguard::{Device, DType, Tensor};
//! let w = Tensor::zeros([2, 2], DType::F32, &Device::Cpu).unwrap();
//! assert_eq!(w.numel(), 4);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use tensorguard;

pub mod amp;
pub use tensorguard::autocast;
pub mod checkpoint;
pub mod data;
pub mod init;
pub mod layers;
mod module;
pub mod ops;
pub mod optim;

pub use data::{DataLoader, Dataset, LoaderOptions, TensorDataset};
pub use layers::{
    BatchNorm, BatchNorm1d, BatchNorm2d, Checkpointed, Conv2d, Dropout, Embedding, Flatten,
    GELUTanh, LayerNorm, Linear, MaxPool2d, ReLU, Sequential, Sigmoid, Tanh, GELU,
};
pub use module::{Epilogue, Module, StateDict};

/// The README's examples (the core's and the training loop), compiled and
/// run as doc tests here, where both crates are in reach.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
