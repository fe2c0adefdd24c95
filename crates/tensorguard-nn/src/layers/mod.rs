//! Layers: each a [`Module`](crate::Module) with PyTorch's name, defaults
//! and initialisation.

mod conv;
mod linear;
mod pool;

pub use conv::Conv2d;
pub use linear::Linear;
pub use pool::{Flatten, MaxPool2d};
