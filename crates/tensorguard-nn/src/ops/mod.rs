//! Fused ops built on the core's public extension point
//! ([`tensorguard::autograd::Function`]): one kernel where the unfused
//! composition would launch several and keep their intermediates alive.

mod bias_gelu;
mod gelu;

pub use bias_gelu::bias_gelu;
pub use gelu::{gelu, GeluApproximate};
