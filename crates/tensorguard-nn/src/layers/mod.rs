//! Layers: each a [`Module`](crate::Module) with PyTorch's name, defaults
//! and initialisation.

mod activation;
mod checkpointed;
mod conv;
mod dropout;
mod embedding;
mod linear;
mod norm;
mod pool;
mod sequential;

pub use activation::{GELUTanh, ReLU, Sigmoid, Tanh, GELU};
pub use checkpointed::Checkpointed;
pub use conv::Conv2d;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use linear::Linear;
pub use norm::{BatchNorm, BatchNorm1d, BatchNorm2d, LayerNorm};
pub use pool::{Flatten, MaxPool2d};
pub use sequential::Sequential;
