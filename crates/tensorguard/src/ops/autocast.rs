//! The autocast hook: one function called at the entry of the ops that
//! PyTorch's autocast lists name, with the table of their policies
//! (`aten/src/ATen/autocast_mode.cpp`, the CUDA lists, for the ops this
//! crate has). The per-thread state is `crate::autocast`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;

use smallvec::SmallVec;

use crate::autocast;
use crate::dtype::DType;
use crate::error::Result;
use crate::memory::alloc::{Shared, WeakShared};
use crate::tensor::{Tensor, TensorImpl};

/// What autocast does to an op's floating inputs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    /// PyTorch's `lower_precision_fp`: cast to the autocast dtype.
    LowerPrecision,
    /// PyTorch's `fp32` and `fp32_set_opt_dtype` (none of this crate's ops
    /// takes a `dtype` argument): cast `f16`/`bf16` up to `f32`.
    Fp32,
}

/// The ops autocast changes, by the name their entry passes to [`inputs`].
/// Ops that are not here run in their inputs' dtypes.
const POLICIES: &[(&str, Policy)] = &[
    ("matmul", Policy::LowerPrecision),
    ("mm", Policy::LowerPrecision),
    ("exp", Policy::Fp32),
    ("log", Policy::Fp32),
    ("pow", Policy::Fp32),
    ("softmax", Policy::Fp32),
    ("log_softmax", Policy::Fp32),
    ("sum", Policy::Fp32),
    ("prod", Policy::Fp32),
];

fn policy(op: &str) -> Option<Policy> {
    POLICIES.iter().find(|(n, _)| *n == op).map(|&(_, p)| p)
}

/// Inputs cast for an op under autocast: `None` when autocast leaves them
/// as they are (always when it is off: one thread-local read), otherwise one
/// tensor per input, cast or an alias of the input.
pub(crate) type Cast = Option<SmallVec<[Tensor; 2]>>;

/// The hook: what autocast makes of `op`'s inputs. The casts are ops
/// (recorded by autograd, so gradients flow back in the inputs' dtypes)
/// made at `site`, the op's call site. An out-of-place op only: in-place
/// ops are not autocast.
#[inline]
pub(crate) fn inputs(
    op: &'static str,
    ins: &[&Tensor],
    site: &'static Location<'static>,
) -> Result<Cast> {
    match autocast::active() {
        None => Ok(None),
        Some(low) => cast_inputs(op, ins, site, low),
    }
}

/// [`inputs`] under autocast to `low` (out of line: every op checks
/// whether autocast is on, few run under it).
#[inline(never)]
fn cast_inputs(
    op: &'static str,
    ins: &[&Tensor],
    site: &'static Location<'static>,
    low: DType,
) -> Result<Cast> {
    let Some(policy) = policy(op) else {
        return Ok(None);
    };
    let target = |t: &Tensor| -> Option<DType> {
        let d = t.dtype();
        // PyTorch's `is_eligible`: floating, and never f64
        if !d.is_float() || d == DType::F64 {
            return None;
        }
        let want = match policy {
            Policy::LowerPrecision => low,
            Policy::Fp32 => DType::F32,
        };
        (d != want).then_some(want)
    };
    if ins.iter().all(|t| target(t).is_none()) {
        return Ok(None);
    }
    let _off = autocast::autocast_disabled();
    let mut out = SmallVec::new();
    for t in ins {
        out.push(match target(t) {
            None => t.alias(),
            Some(d) if policy == Policy::LowerPrecision => cached_cast(t, d, site)?,
            Some(d) => t.copy_to(d, site)?,
        });
    }
    Ok(Some(out))
}

/// A cast kept for the rest of the outermost autocast region.
struct Entry {
    src: WeakShared<TensorImpl>,
    version: u64,
    cast: Tensor,
}

thread_local! {
    /// PyTorch's weight-cast cache: lower-precision casts of leaves that
    /// require grad (the model's weights), reused by every op of the region
    /// that reads the same weight; emptied when the outermost region ends.
    static CACHE: RefCell<HashMap<(usize, DType), Entry>> = RefCell::new(HashMap::new());
}

fn clear_cache() {
    // the entries drop outside the borrow (a drop may run arbitrary code)
    let old = CACHE.with(|c| std::mem::take(&mut *c.borrow_mut()));
    drop(old);
}

fn cached_cast(t: &Tensor, dtype: DType, site: &'static Location<'static>) -> Result<Tensor> {
    // PyTorch caches only fp32 leaves that require grad
    // (and only while grad mode is on: a cast made under `no_grad` has no
    // history, and reusing it later would cut the weight off its gradient)
    let cacheable = t.dtype() == DType::F32
        && t.is_leaf()
        && t.is_requires_grad()
        && !t.is_view()
        && crate::autograd::is_grad_enabled();
    if !cacheable {
        return t.copy_to(dtype, site);
    }
    let key = (Shared::as_ptr(&t.0) as usize, dtype);
    let hit = CACHE.with(|c| {
        c.borrow().get(&key).and_then(|e| {
            let same = e.src.upgrade().is_some_and(|s| Shared::ptr_eq(&s, &t.0));
            // a backward without `retain_graph` consumed the cast's node:
            // cast again (gradient accumulation within one region)
            let live = e
                .cast
                .grad_fn_node()
                .is_some_and(|n| n.backward.lock().is_some());
            (same && live && e.version == t.version()).then(|| e.cast.alias())
        })
    });
    if let Some(c) = hit {
        return Ok(c);
    }
    let cast = t.copy_to(dtype, site)?;
    autocast::on_region_exit(clear_cache);
    let old = CACHE.with(|c| {
        c.borrow_mut().insert(
            key,
            Entry {
                src: Shared::downgrade(&t.0),
                version: t.version(),
                cast: cast.alias(),
            },
        )
    });
    drop(old);
    Ok(cast)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_each_op_once() {
        for (i, (n, _)) in POLICIES.iter().enumerate() {
            assert!(
                POLICIES[i + 1..].iter().all(|(m, _)| m != n),
                "{n} is in the autocast table twice"
            );
        }
        assert_eq!(policy("matmul"), Some(Policy::LowerPrecision));
        assert_eq!(policy("softmax"), Some(Policy::Fp32));
        assert_eq!(policy("add"), None);
    }
}
