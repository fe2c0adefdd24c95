//! Kernel parameters and the launch call.
