//! Compiling the CUDA C sources with NVRTC, caching the binaries, loading modules.

/// The compiled modules of one GPU.
pub(crate) struct Modules {}

impl Modules {
    /// Nothing is compiled until first use.
    pub(crate) fn new(_index: usize) -> Modules {
        Modules {}
    }
}
