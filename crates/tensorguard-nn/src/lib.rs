//! Neural-network building blocks for tensorguard: modules, losses,
//! optimizers, mixed precision and a pinned-memory data loader.
//!
//! They arrive with the training issue; this crate already exists so the
//! workspace has its final shape, and re-exports the core crate. Its fused
//! ops ([`ops`]) are built on the core's public custom-op API
//! ([`tensorguard::autograd::Function`]) alone, without `unsafe` and
//! without editing the core.
//!
//! ```
//! use tensorguard_nn::tensorguard::{Device, DType, Tensor};
//! let w = Tensor::zeros([2, 2], DType::F32, &Device::Cpu).unwrap();
//! assert_eq!(w.numel(), 4);
//! ```
#![forbid(unsafe_code)]

pub use tensorguard;

pub mod ops;
