//! Layers: each a [`Module`](crate::Module) with PyTorch's name, defaults
//! and initialisation.

mod linear;

pub use linear::Linear;
