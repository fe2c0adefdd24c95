//! View ops: every view shares storage (and the version counter) with its
//! base, has PyTorch's shape / strides / storage offset, and in-place writes
//! through it reach the base. Ops that must copy (reshape or flatten of a
//! transposed tensor, contiguous of a non-contiguous one) do not share.
//!
//! Each test runs once per device (`common::test_device!`): `case::cpu`,
//! `case::emu` (an emulated device of its own, with a leak check) and
//! `case::cuda` (skipped, with the reason, where this build has no CUDA).

mod common;

use common::test_device;
use tensorguard::{DType, Device, Error, Result, Tensor};

/// `arange(24)` as f32 with shape `[2, 3, 4]` (strides `[12, 4, 1]`): every
/// element's value is its storage index.
fn base24(dev: &Device) -> Result<Tensor> {
    Tensor::arange(0.0, 24.0, dev)?.view([2, 3, 4])
}

/// The storage indices a layout visits, in row-major order of its shape.
fn storage_indices(shape: &[usize], stride: &[usize], offset: usize) -> Vec<usize> {
    let numel: usize = shape.iter().product();
    let mut out = Vec::with_capacity(numel);
    for flat in 0..numel {
        let mut rem = flat;
        let mut at = offset;
        for d in (0..shape.len()).rev() {
            at += (rem % shape[d]) * stride[d];
            rem /= shape[d];
        }
        out.push(at);
    }
    out
}

/// Check that `v` is a view of `base` (a fresh `base24(dev)`) with the given
/// layout, that it reads the right elements, and that `add_` through it
/// reaches exactly those elements of the base.
fn check_view(
    base: &Tensor,
    v: &Tensor,
    shape: &[usize],
    stride: &[usize],
    offset: usize,
) -> Result<()> {
    assert!(v.shares_storage(base), "view must share storage with base");
    assert!(v.is_view(), "view must report is_view()");
    assert!(!v.is_same(base), "a view is a new tensor, not an alias");
    assert_eq!(v.shape(), shape);
    assert_eq!(v.stride(), stride);
    assert_eq!(v.storage_offset(), offset);
    assert_eq!(v.dtype(), DType::F32);
    let idx = storage_indices(shape, stride, offset);
    let before = base.flatten_all()?.to_vec::<f32>()?;
    let expect: Vec<f32> = idx.iter().map(|&i| before[i]).collect();
    assert_eq!(v.to_vec::<f32>()?, expect, "values read through the view");

    let version = base.version();
    v.add_(100.0)?;
    assert_eq!(
        base.version(),
        version + 1,
        "views share the version counter"
    );
    assert_eq!(v.version(), base.version());
    let got = base.flatten_all()?.to_vec::<f32>()?;
    let want: Vec<f32> = (0..24)
        .map(|i| {
            if idx.contains(&i) {
                before[i] + 100.0
            } else {
                before[i]
            }
        })
        .collect();
    assert_eq!(got, want, "write through the view must reach the base");
    Ok(())
}

test_device!(base_is_not_a_view);
fn base_is_not_a_view(dev: &Device) -> Result<()> {
    let t = Tensor::arange(0.0, 24.0, dev)?;
    assert!(!t.is_view());
    assert_eq!(t.stride(), &[1]);
    assert_eq!(t.storage_offset(), 0);
    assert!(t.shares_storage(&t));
    let other = Tensor::arange(0.0, 24.0, dev)?;
    assert!(!t.shares_storage(&other));
    Ok(())
}

test_device!(view_shares_and_writes_through);
fn view_shares_and_writes_through(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    assert_eq!(b.stride(), &[12, 4, 1]);
    check_view(&b, &b.view([6, 4])?, &[6, 4], &[4, 1], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.view([-1])?, &[24], &[1], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.view([4, -1, 2])?, &[4, 3, 2], &[6, 2, 1], 0)?;
    Ok(())
}

test_device!(reshape_when_possible_is_a_view);
fn reshape_when_possible_is_a_view(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    check_view(&b, &b.reshape([4, 6])?, &[4, 6], &[6, 1], 0)?;
    let b = base24(dev)?;
    // a narrowed (non-contiguous) tensor whose merged dims are still viewable
    let n = b.narrow(0, 1, 1)?; // [1, 3, 4], offset 12
    check_view(&b, &n.reshape([12])?, &[12], &[1], 12)?;
    Ok(())
}

test_device!(transpose_and_t_are_views);
fn transpose_and_t_are_views(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    check_view(&b, &b.transpose(0, 2)?, &[4, 3, 2], &[1, 4, 12], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.transpose(-1, -2)?, &[2, 4, 3], &[12, 1, 4], 0)?;
    let b = base24(dev)?;
    let m = b.view([4, 6])?;
    check_view(&b, &m.t()?, &[6, 4], &[1, 6], 0)?;
    let b = base24(dev)?;
    let row = b.view([24])?;
    check_view(&b, &row.t()?, &[24], &[1], 0)?;
    Ok(())
}

test_device!(permute_is_a_view);
fn permute_is_a_view(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    check_view(&b, &b.permute([2, 0, 1])?, &[4, 2, 3], &[1, 12, 4], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.permute([-1, -2, -3])?, &[4, 3, 2], &[1, 4, 12], 0)?;
    Ok(())
}

test_device!(narrow_is_a_view);
fn narrow_is_a_view(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    check_view(&b, &b.narrow(1, 1, 2)?, &[2, 2, 4], &[12, 4, 1], 4)?;
    let b = base24(dev)?;
    check_view(&b, &b.narrow(2, -2, 2)?, &[2, 3, 2], &[12, 4, 1], 2)?;
    Ok(())
}

test_device!(select_is_a_view);
fn select_is_a_view(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    check_view(&b, &b.select(1, 2)?, &[2, 4], &[12, 1], 8)?;
    let b = base24(dev)?;
    check_view(&b, &b.select(0, -1)?, &[3, 4], &[4, 1], 12)?;
    let b = base24(dev)?;
    let s = b.select(0, 1)?.select(0, 2)?.select(0, 3)?; // a 0-dim view
    check_view(&b, &s, &[], &[], 23)?;
    Ok(())
}

test_device!(slice_is_a_view);
fn slice_is_a_view(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    check_view(&b, &b.slice(2, 1..3)?, &[2, 3, 2], &[12, 4, 1], 1)?;
    let b = base24(dev)?;
    check_view(&b, &b.slice(1, -2..)?, &[2, 2, 4], &[12, 4, 1], 4)?;
    let b = base24(dev)?;
    check_view(&b, &b.slice(0, ..)?, &[2, 3, 4], &[12, 4, 1], 0)?;
    let b = base24(dev)?;
    // bounds are clamped as in Python
    check_view(&b, &b.slice(2, 2..100)?, &[2, 3, 2], &[12, 4, 1], 2)?;
    Ok(())
}

test_device!(slice_step_is_a_view);
fn slice_step_is_a_view(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    check_view(&b, &b.slice_step(2, .., 2)?, &[2, 3, 2], &[12, 4, 2], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.slice_step(2, 1.., 2)?, &[2, 3, 2], &[12, 4, 2], 1)?;
    let b = base24(dev)?;
    check_view(&b, &b.slice_step(1, 0..3, 2)?, &[2, 2, 4], &[12, 8, 1], 0)?;
    let b = base24(dev)?;
    let flat = b.view([24])?;
    check_view(&b, &flat.slice_step(0, 3..20, 5)?, &[4], &[5], 3)?;
    Ok(())
}

test_device!(expand_is_a_view_that_sees_base_writes);
fn expand_is_a_view_that_sees_base_writes(dev: &Device) -> Result<()> {
    // An expanded tensor cannot be written in place, so check the other
    // direction: writes to the base are seen through the expanded view.
    let base = Tensor::arange(0.0, 3.0, dev)?.view([1, 3])?;
    let e = base.expand([4, 3])?;
    assert!(e.shares_storage(&base));
    assert!(e.is_view());
    assert_eq!(e.shape(), &[4, 3]);
    assert_eq!(e.stride(), &[0, 1]);
    assert_eq!(e.storage_offset(), 0);
    assert!(!e.is_contiguous());
    base.add_(10.0)?;
    assert_eq!(e.version(), 1);
    assert_eq!(e.to_vec2::<f32>()?, vec![vec![10.0, 11.0, 12.0]; 4]);

    // new leading dims and -1
    let col = Tensor::arange(0.0, 2.0, dev)?.view([2, 1])?;
    let e2 = col.expand([3, -1, 4])?;
    assert_eq!(e2.shape(), &[3, 2, 4]);
    assert_eq!(e2.stride(), &[0, 1, 0]);
    assert!(e2.shares_storage(&col));
    col.select(0, 1)?.fill_(7.0)?;
    assert_eq!(
        e2.to_vec3::<f32>()?,
        vec![vec![vec![0.0; 4], vec![7.0; 4]]; 3]
    );

    let ea = Tensor::ones([1], DType::F32, dev)?.expand_as(&e2)?;
    assert_eq!(ea.shape(), &[3, 2, 4]);
    assert_eq!(ea.stride(), &[0, 0, 0]);
    Ok(())
}

test_device!(squeeze_is_a_view);
fn squeeze_is_a_view(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    let s = b.view([2, 1, 12, 1])?;
    assert_eq!(s.stride(), &[12, 12, 1, 1]);
    check_view(&b, &s.squeeze()?, &[2, 12], &[12, 1], 0)?;
    let b = base24(dev)?;
    let s = b.view([2, 1, 12, 1])?;
    check_view(&b, &s.squeeze_dim(1)?, &[2, 12, 1], &[12, 1, 1], 0)?;
    let b = base24(dev)?;
    let s = b.view([2, 1, 12, 1])?;
    check_view(&b, &s.squeeze_dim(-1)?, &[2, 1, 12], &[12, 12, 1], 0)?;
    let b = base24(dev)?;
    // a dim whose size is not 1 is left alone, but the result is still a view
    check_view(&b, &b.squeeze_dim(0)?, &[2, 3, 4], &[12, 4, 1], 0)?;
    Ok(())
}

test_device!(unsqueeze_is_a_view);
fn unsqueeze_is_a_view(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    check_view(&b, &b.unsqueeze(1)?, &[2, 1, 3, 4], &[12, 12, 4, 1], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.unsqueeze(0)?, &[1, 2, 3, 4], &[24, 12, 4, 1], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.unsqueeze(-1)?, &[2, 3, 4, 1], &[12, 4, 1, 1], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.unsqueeze(3)?, &[2, 3, 4, 1], &[12, 4, 1, 1], 0)?;
    Ok(())
}

test_device!(flatten_and_unflatten_are_views);
fn flatten_and_unflatten_are_views(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    check_view(&b, &b.flatten(0, 1)?, &[6, 4], &[4, 1], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.flatten(1, 2)?, &[2, 12], &[12, 1], 0)?;
    let b = base24(dev)?;
    check_view(&b, &b.flatten_all()?, &[24], &[1], 0)?;
    let b = base24(dev)?;
    check_view(
        &b,
        &b.unflatten(2, [2, 2])?,
        &[2, 3, 2, 2],
        &[12, 4, 2, 1],
        0,
    )?;
    let b = base24(dev)?;
    check_view(
        &b,
        &b.unflatten(0, [-1, 1])?,
        &[2, 1, 3, 4],
        &[12, 12, 4, 1],
        0,
    )?;
    // unflatten of one dim of a transposed tensor is still a view (PyTorch:
    // torch.arange(24.).view(4, 6).t().unflatten(0, (2, 3)).stride() == (3, 1, 6))
    let b = base24(dev)?;
    let t = b.view([4, 6])?.t()?;
    check_view(&b, &t.unflatten(0, [2, 3])?, &[2, 3, 4], &[3, 1, 6], 0)?;
    Ok(())
}

test_device!(chunk_results_are_views);
fn chunk_results_are_views(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    let parts = b.chunk(2, 2)?;
    assert_eq!(parts.len(), 2);
    check_view(&b, &parts[0], &[2, 3, 2], &[12, 4, 1], 0)?;
    check_view(&b, &parts[1], &[2, 3, 2], &[12, 4, 1], 2)?;
    // after both writes every element was written exactly once
    assert_eq!(
        b.flatten_all()?.to_vec::<f32>()?,
        (0..24).map(|i| i as f32 + 100.0).collect::<Vec<_>>()
    );
    assert_eq!(b.version(), 2);

    // uneven: size 3 in 2 chunks -> 2 + 1
    let b = base24(dev)?;
    let parts = b.chunk(2, 1)?;
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].shape(), &[2, 2, 4]);
    assert_eq!(parts[1].shape(), &[2, 1, 4]);
    check_view(&b, &parts[1], &[2, 1, 4], &[12, 4, 1], 8)?;
    Ok(())
}

test_device!(split_results_are_views);
fn split_results_are_views(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    let parts = b.split(2, 1)?;
    assert_eq!(parts.len(), 2);
    check_view(&b, &parts[0], &[2, 2, 4], &[12, 4, 1], 0)?;
    let b = base24(dev)?;
    let parts = b.split(2, 1)?;
    check_view(&b, &parts[1], &[2, 1, 4], &[12, 4, 1], 8)?;
    let b = base24(dev)?;
    let parts = b.split_sizes(&[1, 3], 2)?;
    assert_eq!(parts.len(), 2);
    check_view(&b, &parts[0], &[2, 3, 1], &[12, 4, 1], 0)?;
    check_view(&b, &parts[1], &[2, 3, 3], &[12, 4, 1], 1)?;
    Ok(())
}

test_device!(views_of_views_compose);
fn views_of_views_compose(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    let v = b.transpose(0, 1)?.slice(2, 1..)?.select(1, 1)?; // [3, 3]
    check_view(&b, &v, &[3, 3], &[4, 1], 13)?;
    Ok(())
}

test_device!(view_of_transposed_is_invalid_view);
fn view_of_transposed_is_invalid_view(dev: &Device) -> Result<()> {
    let b = Tensor::arange(0.0, 6.0, dev)?.view([2, 3])?;
    let t = b.t()?;
    let err = t.view([6]).unwrap_err();
    assert!(
        matches!(err, Error::InvalidView { op: "view", .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("reshape"), "{msg}");
    assert!(msg.contains("contiguous"), "{msg}");
    assert!(msg.contains("[3, 2]"), "names the shape: {msg}");
    assert!(msg.contains("[1, 3]"), "names the strides: {msg}");
    assert!(msg.contains("[6]"), "names the target shape: {msg}");
    // a permuted 3-D tensor
    let err = base24(dev)?.permute([1, 0, 2])?.view([6, 4]).unwrap_err();
    assert!(matches!(err, Error::InvalidView { .. }), "{err:?}");
    // an expanded tensor cannot be flattened by view either
    let e = Tensor::ones([1, 3], DType::F32, dev)?.expand([2, 3])?;
    assert!(matches!(
        e.view([6]).unwrap_err(),
        Error::InvalidView { .. }
    ));
    Ok(())
}

test_device!(reshape_of_transposed_copies);
fn reshape_of_transposed_copies(dev: &Device) -> Result<()> {
    let b = Tensor::arange(0.0, 6.0, dev)?.view([2, 3])?;
    let t = b.t()?;
    let r = t.reshape([6])?;
    assert!(!r.shares_storage(&b));
    assert!(!r.shares_storage(&t));
    assert!(r.is_contiguous());
    assert_eq!(r.stride(), &[1]);
    assert_eq!(r.storage_offset(), 0);
    assert_eq!(r.to_vec::<f32>()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert_eq!(r.version(), 0);
    r.add_(1.0)?;
    assert_eq!(b.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(b.version(), 0);

    // flatten follows reshape
    let f = b.t()?.flatten_all()?;
    assert!(!f.shares_storage(&b));
    assert_eq!(f.to_vec::<f32>()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    Ok(())
}

test_device!(reshape_copy_is_not_a_view);
/// PyTorch: `torch.arange(6.).view(2, 3).t().reshape(6)._is_view()` is
/// `False` (reshape copies through `_unsafe_view`, which is not a view).
fn reshape_copy_is_not_a_view(dev: &Device) -> Result<()> {
    let b = Tensor::arange(0.0, 6.0, dev)?.view([2, 3])?;
    assert!(!b.t()?.reshape([6])?.is_view());
    assert!(!b.t()?.flatten_all()?.is_view());
    Ok(())
}

test_device!(contiguous_of_contiguous_is_alias);
fn contiguous_of_contiguous_is_alias(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    let c = b.contiguous()?;
    assert!(c.is_same(&b));
    assert!(c.shares_storage(&b));
    c.add_(1.0)?;
    assert_eq!(b.version(), 1);
    assert_eq!(b.flatten_all()?.to_vec::<f32>()?[0], 1.0);
    // a contiguous view is also returned as is
    let s = b.select(0, 1)?;
    let sc = s.contiguous()?;
    assert!(sc.is_same(&s));
    Ok(())
}

test_device!(contiguous_of_transposed_is_copy);
fn contiguous_of_transposed_is_copy(dev: &Device) -> Result<()> {
    let b = Tensor::arange(0.0, 6.0, dev)?.view([2, 3])?;
    let t = b.t()?;
    assert!(!t.is_contiguous());
    let c = t.contiguous()?;
    assert!(!c.is_same(&t));
    assert!(!c.shares_storage(&b));
    assert!(c.is_contiguous());
    assert_eq!(c.shape(), &[3, 2]);
    assert_eq!(c.stride(), &[2, 1]);
    assert_eq!(
        c.to_vec2::<f32>()?,
        vec![vec![0.0, 3.0], vec![1.0, 4.0], vec![2.0, 5.0]]
    );
    c.fill_(9.0)?;
    assert_eq!(b.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(b.version(), 0);
    assert_eq!(c.version(), 1);
    Ok(())
}

test_device!(is_contiguous_follows_layout);
fn is_contiguous_follows_layout(dev: &Device) -> Result<()> {
    let b = base24(dev)?;
    assert!(b.is_contiguous());
    assert!(!b.transpose(0, 1)?.is_contiguous());
    assert!(!b.slice_step(2, .., 2)?.is_contiguous());
    assert!(b.select(0, 1)?.is_contiguous());
    assert!(!b.narrow(2, 0, 2)?.is_contiguous());
    assert!(b.narrow(0, 1, 1)?.is_contiguous());
    assert!(b.unsqueeze(1)?.is_contiguous());
    Ok(())
}

test_device!(views_keep_storage_alive_after_base_drop);
fn views_keep_storage_alive_after_base_drop(dev: &Device) -> Result<()> {
    let v = {
        let b = base24(dev)?;
        b.select(0, 1)?.select(0, 0)?
    };
    assert_eq!(v.to_vec::<f32>()?, vec![12.0, 13.0, 14.0, 15.0]);
    v.mul_(2.0)?;
    assert_eq!(v.to_vec::<f32>()?, vec![24.0, 26.0, 28.0, 30.0]);
    Ok(())
}

test_device!(elementwise_outputs_keep_the_inputs_memory_order);
/// PyTorch's rule (TensorIterator): the output of an elementwise op is
/// dense in the memory order of its inputs, the first input that orders two
/// dims deciding. Strides as PyTorch 2.15 prints them for a 3x4 `a`.
fn elementwise_outputs_keep_the_inputs_memory_order(dev: &Device) -> Result<()> {
    let a = Tensor::arange(0, 12, dev)?
        .to_dtype(DType::F32)?
        .view([3, 4])?;
    let at = a.t()?;
    let b = Tensor::ones([4, 3], DType::F32, dev)?;
    let want: Vec<f32> = at.contiguous()?.to_vec()?;
    let e = at.exp()?;
    assert_eq!(e.stride(), &[1, 4]);
    assert!(!e.is_contiguous());
    assert_eq!(e.to_vec::<f32>()?, at.contiguous()?.exp()?.to_vec::<f32>()?);
    let s = at.add(&b)?;
    assert_eq!(s.stride(), &[1, 4]);
    assert_eq!(
        s.to_vec::<f32>()?,
        want.iter().map(|v| v + 1.0).collect::<Vec<_>>()
    );
    assert_eq!(b.add(&at)?.stride(), &[3, 1]);
    assert_eq!(at.add(1.0)?.stride(), &[1, 4]);
    assert_eq!(at.relu()?.stride(), &[1, 4]);
    assert_eq!(at.gt(0.0)?.stride(), &[1, 4]);
    assert_eq!(at.clamp_min(0.0)?.stride(), &[1, 4]);
    let d = at.to_dtype(DType::F64)?;
    assert_eq!(d.stride(), &[1, 4]);
    assert_eq!(
        d.to_vec::<f64>()?,
        want.iter().map(|&v| v as f64).collect::<Vec<_>>()
    );
    // `where` with a contiguous condition: the condition decides
    let cond = b.gt(0.0)?;
    assert_eq!(Tensor::where_cond(&cond, &at, &at)?.stride(), &[3, 1]);
    assert_eq!(
        Tensor::where_cond(&at.gt(0.0)?, &at, 0.0)?.stride(),
        &[1, 4]
    );
    // a permuted 3-d tensor, and a strided slice (row-major: contiguous)
    let p = base24(dev)?.permute([2, 0, 1])?;
    let pe = p.neg()?;
    assert_eq!(pe.stride(), &[1, 12, 4]);
    assert_eq!(
        pe.contiguous()?.to_vec::<f32>()?,
        p.contiguous()?.neg()?.to_vec::<f32>()?
    );
    assert!(a.slice_step(1, .., 2)?.exp()?.is_contiguous());
    // views of the result follow PyTorch too: a transposed result views
    // back as the original matrix
    assert_eq!(e.t()?.stride(), &[4, 1]);
    assert!(e.view([12]).is_err());
    Ok(())
}

test_device!(clone_keeps_memory_order_contiguous_does_not);
/// `clone` is PyTorch's `preserve_format`; `contiguous` is row-major.
fn clone_keeps_memory_order_contiguous_does_not(dev: &Device) -> Result<()> {
    let at = base24(dev)?.view([6, 4])?.t()?;
    let c = at.clone()?;
    assert_eq!(c.stride(), &[1, 4]);
    assert!(!c.shares_storage(&at));
    assert_eq!(
        c.contiguous()?.to_vec::<f32>()?,
        at.contiguous()?.to_vec::<f32>()?
    );
    let k = at.contiguous()?;
    assert_eq!(k.stride(), &[6, 1]);
    Ok(())
}
