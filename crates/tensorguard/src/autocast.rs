//! Automatic mixed precision: PyTorch's `torch.autocast`, per thread.
//!
//! Inside an autocast region ([`autocast`]), ops run in the dtype that
//! PyTorch's autocast op lists give them:
//!
//! - **lower precision** (`matmul`, `mm`, and everything built on them,
//!   such as linear layers and convolutions): floating inputs are cast to
//!   the region's dtype (`bf16` or `f16`), so `f32 @ f16` just works and
//!   gives an `f16`/`bf16` result;
//! - **fp32** (`exp`, `log`, `pow`, `softmax`, `log_softmax`, `sum`,
//!   `prod`, and the losses built from them): `f16`/`bf16` inputs are cast
//!   up to `f32`;
//! - every other op runs in the dtype of its inputs, as outside autocast.
//!
//! `f64` inputs are never cast (PyTorch's `is_eligible`), and in-place ops
//! are not autocast. The casts are ops like any other: autograd records
//! them, so the gradient of an `f32` leaf used by an autocast matmul is an
//! `f32` gradient. Backward runs with autocast off: each backward formula
//! runs in the dtypes its forward op used (PyTorch's rule).
//!
//! The hook that applies these lists is one function called at the entry of
//! the ops concerned, with the table of op policies beside it
//! (`ops/autocast.rs`); this module holds the per-thread state.
//!
//! ```
//! use tensorguard::{autocast, Device, DType, Tensor};
//! # fn main() -> tensorguard::Result<()> {
//! let a = Tensor::ones([2, 3], DType::F32, &Device::Cpu)?;
//! let b = Tensor::ones([3, 2], DType::F16, &Device::Cpu)?;
//! assert!(a.matmul(&b).is_err()); // mixed dtypes: an error outside autocast
//! {
//!     let _amp = autocast::autocast(DType::BF16)?;
//!     assert_eq!(a.matmul(&b)?.dtype(), DType::BF16);
//!     let _off = autocast::autocast_disabled();
//!     assert!(!autocast::is_autocast_enabled());
//! }
//! assert!(!autocast::is_autocast_enabled());
//! # Ok(()) }
//! ```

use std::cell::Cell;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// PyTorch's default autocast dtype for accelerators (`torch.float16`).
const DEFAULT_DTYPE: DType = DType::F16;

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(false) };
    static DTYPE: Cell<DType> = const { Cell::new(DEFAULT_DTYPE) };
    /// How many autocast regions are open on this thread (PyTorch's
    /// `nesting`): leaving the outermost one clears the cast cache.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Whether autocast is on for this thread.
pub fn is_autocast_enabled() -> bool {
    ENABLED.with(|e| e.get())
}

/// The dtype lower-precision ops run in while autocast is on (`f16` until an
/// [`autocast`] region sets another, as PyTorch's default for accelerators).
pub fn autocast_dtype() -> DType {
    DTYPE.with(|d| d.get())
}

/// The active autocast dtype, or `None` when autocast is off (the hook's
/// fast path: one thread-local read).
pub(crate) fn active() -> Option<DType> {
    is_autocast_enabled().then(autocast_dtype)
}

/// Restores the previous autocast state (on/off and dtype) when dropped.
#[must_use = "autocast is restored when the guard is dropped"]
pub struct AutocastGuard {
    prev_enabled: bool,
    prev_dtype: DType,
    region: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl AutocastGuard {
    fn set(enabled: bool, dtype: DType, region: bool) -> AutocastGuard {
        let prev_enabled = ENABLED.with(|e| e.replace(enabled));
        let prev_dtype = DTYPE.with(|d| d.replace(dtype));
        if region {
            DEPTH.with(|d| d.set(d.get() + 1));
        }
        AutocastGuard {
            prev_enabled,
            prev_dtype,
            region,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        ENABLED.with(|e| e.set(self.prev_enabled));
        DTYPE.with(|d| d.set(self.prev_dtype));
        if self.region {
            let left = DEPTH.with(|d| {
                let n = d.get().saturating_sub(1);
                d.set(n);
                n
            });
            if left == 0 {
                clear_cache();
            }
        }
    }
}

/// Turn autocast on for this thread until the guard drops, with `dtype`
/// (`DType::BF16` or `DType::F16`) for the lower-precision ops (PyTorch's
/// `with torch.autocast(device_type, dtype=dtype):`). Regions nest; each
/// guard restores the state it found.
///
/// Any other dtype is an error: autocast lowers precision, and `f32` or an
/// integer dtype would not.
pub fn autocast(dtype: DType) -> Result<AutocastGuard> {
    if !matches!(dtype, DType::BF16 | DType::F16) {
        return Err(Error::invalid(
            "autocast",
            format!(
                "autocast runs lower-precision ops in bf16 or f16, but {dtype} was asked for. Pass `DType::BF16` (or `DType::F16`); to run in full precision, do not open an autocast region (or use `autocast_disabled()`)."
            ),
        ));
    }
    Ok(AutocastGuard::set(true, dtype, true))
}

/// Turn autocast off for this thread until the guard drops (PyTorch's
/// nested `with torch.autocast(..., enabled=False):`), e.g. around an op
/// that must run in the dtypes it is given.
pub fn autocast_disabled() -> AutocastGuard {
    set_autocast_enabled(false)
}

/// Turn autocast on or off for this thread until the guard drops, keeping
/// the current [`autocast_dtype`].
pub fn set_autocast_enabled(on: bool) -> AutocastGuard {
    AutocastGuard::set(on, autocast_dtype(), false)
}

/// The per-thread cache of casts (PyTorch's `cached_casts`), kept by the
/// hook in `ops`; the state only knows when to empty it.
type ClearFn = fn();

thread_local! {
    static CLEAR: Cell<Option<ClearFn>> = const { Cell::new(None) };
}

/// Register the function that empties this thread's cast cache (called by
/// the hook when it first caches a cast on this thread).
pub(crate) fn on_region_exit(f: ClearFn) {
    CLEAR.with(|c| c.set(Some(f)));
}

fn clear_cache() {
    if let Some(f) = CLEAR.with(|c| c.get()) {
        f();
    }
}
