//! Fused ops built on the core's public extension point
//! ([`tensorguard::autograd::Function`]): one kernel where the unfused
//! composition would launch several and keep their intermediates alive.
//!
//! Convolution ([`conv2d`]: im2col + the core's matmul), pooling
//! ([`max_pool2d`]) and the losses ([`cross_entropy`], fused; [`nll_loss`]
//! and [`mse_loss`], compositions) take PyTorch's `torch.nn.functional`
//! arguments. Their kernels are host kernels (safe Rust, split over the
//! rayon pool when the work is large): they run on the cpu and on emulated
//! devices. On a CUDA device each is composed of the core's ops instead
//! (`composed`), which have device kernels and autograd of their own.

pub(crate) mod bias;
mod bias_gelu;
mod bias_relu;
mod channel_bias;
pub(crate) mod composed;
mod conv;
mod cross_entropy;
mod gelu;
mod host;
mod loss;
mod pool;

pub use bias_gelu::bias_gelu;
pub use bias_relu::bias_relu;
pub use conv::conv2d;
pub use cross_entropy::{cross_entropy, CrossEntropyOptions};
pub use gelu::{gelu, GeluApproximate};
pub use host::Pair;
pub use loss::{mse_loss, nll_loss, Reduction};
pub use pool::max_pool2d;
