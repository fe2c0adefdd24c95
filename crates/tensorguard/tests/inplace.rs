//! In-place ops: the article's examples, parity of every `op_` with its
//! out-of-place twin, the checks that refuse unsafe writes (expanded
//! targets, lossy casts, partial overlap) and version counters with the call
//! site of the last write.
//!
//! Each test runs once per device (`common::test_device!`): `case::cpu`,
//! `case::emu` (an emulated device of its own, with a leak check) and
//! `case::cuda` (skipped, with the reason, where this build has no CUDA).

mod common;

use common::test_device;
use tensorguard::{DType, Device, Error, Result, Tensor};

fn f32s(dev: &Device, v: &[f32], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_slice(v, shape, dev)
}

/// Bitwise equality of f32 vectors (so NaN results compare equal).
fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    let g: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
    let w: Vec<u32> = want.iter().map(|x| x.to_bits()).collect();
    assert_eq!(g, w, "{what}: got {got:?}, want {want:?}");
}

// ---------------------------------------------------------------------------
// The article's three examples
// ---------------------------------------------------------------------------

test_device!(article_1_write_through_transposed_view);
fn article_1_write_through_transposed_view(dev: &Device) -> Result<()> {
    let base = Tensor::arange(0, 6, dev)?.view([2, 3])?;
    base.transpose(0, 1)?.add_(1)?;
    assert_eq!(base.to_vec2::<i64>()?, vec![vec![1, 2, 3], vec![4, 5, 6]]);
    assert_eq!(base.version(), 1);
    Ok(())
}

test_device!(article_2_clone_is_independent_alias_is_not);
fn article_2_clone_is_independent_alias_is_not(dev: &Device) -> Result<()> {
    let a = Tensor::arange(0.0, 4.0, dev)?;
    let c = a.clone()?;
    let al = a.alias();
    assert!(!c.shares_storage(&a));
    assert!(!c.is_same(&a));
    assert!(al.is_same(&a));
    assert!(al.shares_storage(&a));

    c.add_(10.0)?;
    assert_eq!(a.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0]);
    assert_eq!(c.to_vec::<f32>()?, vec![10.0, 11.0, 12.0, 13.0]);
    assert_eq!(a.version(), 0);

    al.mul_(2.0)?;
    assert_eq!(a.to_vec::<f32>()?, vec![0.0, 2.0, 4.0, 6.0]);
    assert_eq!(a.version(), 1);
    assert_eq!(c.to_vec::<f32>()?, vec![10.0, 11.0, 12.0, 13.0]);

    // and the other direction: writing to the original is seen by the alias,
    // not by the clone
    a.fill_(5.0)?;
    assert_eq!(al.to_vec::<f32>()?, vec![5.0; 4]);
    assert_eq!(c.to_vec::<f32>()?, vec![10.0, 11.0, 12.0, 13.0]);
    Ok(())
}

test_device!(article_3_all_views_see_writes);
fn article_3_all_views_see_writes(dev: &Device) -> Result<()> {
    let base = Tensor::zeros([3, 4], DType::F32, dev)?;
    let row = base.select(0, 1)?;
    let col = base.select(1, 2)?;
    let t = base.t()?;
    let flat = base.view([-1])?;
    let corner = base.narrow(0, 1, 2)?.narrow(1, 2, 2)?;

    row.fill_(1.0)?; // row 1
    assert_eq!(col.to_vec::<f32>()?, vec![0.0, 1.0, 0.0]);
    assert_eq!(
        t.to_vec2::<f32>()?,
        vec![
            vec![0.0, 1.0, 0.0],
            vec![0.0, 1.0, 0.0],
            vec![0.0, 1.0, 0.0],
            vec![0.0, 1.0, 0.0]
        ]
    );
    corner.add_(10.0)?; // rows 1..3, cols 2..4
    assert_eq!(
        flat.to_vec::<f32>()?,
        vec![0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 11.0, 11.0, 0.0, 0.0, 10.0, 10.0]
    );
    assert_eq!(row.to_vec::<f32>()?, vec![1.0, 1.0, 11.0, 11.0]);
    assert_eq!(col.to_vec::<f32>()?, vec![0.0, 11.0, 10.0]);
    for v in [&base, &row, &col, &t, &flat, &corner] {
        assert_eq!(v.version(), 2);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Every `op_` equals its out-of-place twin
// ---------------------------------------------------------------------------

const A: [f32; 6] = [-1.5, -0.5, 0.25, 1.0, 2.0, 3.5];
const B: [f32; 3] = [0.5, 2.0, -3.0];

/// `a.op(b)` out of place vs `a.clone().op_(b)` for a broadcast tensor and a
/// scalar second operand.
macro_rules! check_binary {
    ($dev:ident; $($op:ident / $op_:ident),* $(,)?) => {$({
        let a = f32s($dev, &A, &[2, 3])?;
        let b = f32s($dev, &B, &[3])?;
        let want = a.$op(&b)?.to_dtype(DType::F32)?.to_vec::<f32>()?;
        let t = a.clone()?;
        let r = t.$op_(&b)?;
        assert!(r.is_same(&t), "{} returns self", stringify!($op_));
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.dtype(), DType::F32);
        assert_bits_eq(&t.to_vec::<f32>()?, &want, stringify!($op_));
        assert_eq!(t.version(), 1, "{} bumps the version once", stringify!($op_));

        let want = a.$op(0.5)?.to_dtype(DType::F32)?.to_vec::<f32>()?;
        let t = a.clone()?;
        t.$op_(0.5)?;
        assert_bits_eq(&t.to_vec::<f32>()?, &want, concat!(stringify!($op_), " scalar"));
        assert_eq!(a.to_vec::<f32>()?, A.to_vec(), "the input is unchanged");
    })*};
}

test_device!(binary_inplace_matches_out_of_place);
fn binary_inplace_matches_out_of_place(dev: &Device) -> Result<()> {
    check_binary!(
        dev;
        add / add_,
        sub / sub_,
        mul / mul_,
        div / div_,
        pow / pow_,
        maximum / maximum_,
        minimum / minimum_,
        eq / eq_,
        ne / ne_,
        lt / lt_,
        le / le_,
        gt / gt_,
        ge / ge_,
    );
    Ok(())
}

test_device!(binary_inplace_exact_values);
fn binary_inplace_exact_values(dev: &Device) -> Result<()> {
    let b = f32s(dev, &B, &[3])?;
    let t = f32s(dev, &A, &[2, 3])?;
    t.add_(&b)?;
    assert_eq!(t.to_vec::<f32>()?, vec![-1.0, 1.5, -2.75, 1.5, 4.0, 0.5]);
    let t = f32s(dev, &A, &[2, 3])?;
    t.mul_(&b)?;
    assert_eq!(
        t.to_vec::<f32>()?,
        vec![-0.75, -1.0, -0.75, 0.5, 4.0, -10.5]
    );
    let t = f32s(dev, &A, &[2, 3])?;
    t.div_(2.0)?;
    assert_eq!(
        t.to_vec::<f32>()?,
        vec![-0.75, -0.25, 0.125, 0.5, 1.0, 1.75]
    );
    let t = f32s(dev, &A, &[2, 3])?;
    t.gt_(0.0)?;
    assert_eq!(t.to_vec::<f32>()?, vec![0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
    let t = f32s(dev, &A, &[2, 3])?;
    t.maximum_(&b)?;
    assert_eq!(t.to_vec::<f32>()?, vec![0.5, 2.0, 0.25, 1.0, 2.0, 3.5]);
    let t = f32s(dev, &[1.0, 2.0, 3.0], &[3])?;
    t.pow_(2)?;
    assert_eq!(t.to_vec::<f32>()?, vec![1.0, 4.0, 9.0]);
    // integers
    let i = Tensor::arange(0, 6, dev)?.view([2, 3])?;
    i.mul_(&Tensor::from_vec(vec![1i64, -1, 2], [3], dev)?)?;
    i.sub_(1)?;
    assert_eq!(i.to_vec2::<i64>()?, vec![vec![-1, -2, 3], vec![2, -5, 9]]);
    assert_eq!(i.dtype(), DType::I64);
    assert_eq!(i.version(), 2);
    Ok(())
}

macro_rules! check_unary {
    ($dev:ident; $($op:ident / $op_:ident),* $(,)?) => {$({
        let a = f32s($dev, &A, &[2, 3])?;
        let want = a.$op()?.to_vec::<f32>()?;
        let t = a.clone()?;
        let r = t.$op_()?;
        assert!(r.is_same(&t), "{} returns self", stringify!($op_));
        assert_bits_eq(&t.to_vec::<f32>()?, &want, stringify!($op_));
        assert_eq!(t.version(), 1, "{} bumps the version once", stringify!($op_));
        // through a transposed view
        let base = a.clone()?;
        base.t()?.$op_()?;
        assert_bits_eq(&base.to_vec::<f32>()?, &want, concat!(stringify!($op_), " via t()"));
    })*};
}

test_device!(unary_inplace_matches_out_of_place);
fn unary_inplace_matches_out_of_place(dev: &Device) -> Result<()> {
    check_unary!(
        dev;
        neg / neg_,
        abs / abs_,
        relu / relu_,
        exp / exp_,
        log / log_,
        sqrt / sqrt_,
        sigmoid / sigmoid_,
        tanh / tanh_,
    );
    let t = f32s(dev, &A, &[2, 3])?;
    t.abs_()?.neg_()?;
    assert_eq!(
        t.to_vec::<f32>()?,
        vec![-1.5, -0.5, -0.25, -1.0, -2.0, -3.5]
    );
    let t = f32s(dev, &A, &[2, 3])?;
    t.relu_()?;
    assert_eq!(t.to_vec::<f32>()?, vec![0.0, 0.0, 0.25, 1.0, 2.0, 3.5]);
    assert_eq!(t.version(), 1);
    let i = Tensor::from_vec(vec![-3i64, 0, 4], [3], dev)?;
    i.abs_()?;
    assert_eq!(i.to_vec::<i64>()?, vec![3, 0, 4]);
    i.neg_()?;
    assert_eq!(i.to_vec::<i64>()?, vec![-3, 0, -4]);
    Ok(())
}

test_device!(clamp_inplace_matches_out_of_place);
fn clamp_inplace_matches_out_of_place(dev: &Device) -> Result<()> {
    let a = f32s(dev, &A, &[2, 3])?;
    let t = a.clone()?;
    t.clamp_(-1.0, 1.0)?;
    assert_eq!(t.to_vec::<f32>()?, a.clamp(-1.0, 1.0)?.to_vec::<f32>()?);
    assert_eq!(t.to_vec::<f32>()?, vec![-1.0, -0.5, 0.25, 1.0, 1.0, 1.0]);
    let t = a.clone()?;
    t.clamp_min_(0.0)?;
    assert_eq!(t.to_vec::<f32>()?, a.clamp_min(0.0)?.to_vec::<f32>()?);
    assert_eq!(t.to_vec::<f32>()?, vec![0.0, 0.0, 0.25, 1.0, 2.0, 3.5]);
    let t = a.clone()?;
    t.clamp_max_(0.5)?;
    assert_eq!(t.to_vec::<f32>()?, a.clamp_max(0.5)?.to_vec::<f32>()?);
    assert_eq!(t.to_vec::<f32>()?, vec![-1.5, -0.5, 0.25, 0.5, 0.5, 0.5]);
    assert_eq!(t.version(), 1);
    let i = Tensor::arange(-3, 4, dev)?;
    i.clamp_(-1, 2)?;
    assert_eq!(i.to_vec::<i64>()?, vec![-1, -1, -1, 0, 1, 2, 2]);
    Ok(())
}

test_device!(fill_and_zero);
fn fill_and_zero(dev: &Device) -> Result<()> {
    let t = f32s(dev, &A, &[2, 3])?;
    t.fill_(7.5)?;
    assert_eq!(
        t.to_vec::<f32>()?,
        Tensor::full([2, 3], 7.5, DType::F32, dev)?.to_vec::<f32>()?
    );
    t.zero_()?;
    assert_eq!(t.to_vec::<f32>()?, vec![0.0; 6]);
    assert_eq!(t.version(), 2);
    // fill through a view, int tensor, float value truncated like PyTorch
    let i = Tensor::zeros([2, 3], DType::I64, dev)?;
    i.select(1, 1)?.fill_(4)?;
    assert_eq!(i.to_vec2::<i64>()?, vec![vec![0, 4, 0], vec![0, 4, 0]]);
    // a float value into an int tensor truncates toward zero, as in PyTorch
    i.fill_(-2.7)?;
    assert_eq!(i.to_vec::<i64>()?, vec![-2; 6]);
    let b = Tensor::zeros([3], DType::Bool, dev)?;
    b.fill_(true)?;
    assert_eq!(b.to_vec::<bool>()?, vec![true; 3]);
    Ok(())
}

// Staged launches (Note [Staging above the backends]): operands a kernel
// cannot take as they are go through temporaries made by `ops::launch`,
// the same for every device.
test_device!(staged_operands_give_exact_values);
fn staged_operands_give_exact_values(dev: &Device) -> Result<()> {
    // an input on the output's storage (another row of it)
    let m = f32s(dev, &[1.0, 2.0, 3.0, 4.0], &[2, 2])?;
    m.select(0, 0)?.add_(&m.select(0, 1)?)?;
    assert_eq!(m.to_vec2::<f32>()?, vec![vec![4.0, 6.0], vec![3.0, 4.0]]);
    assert_eq!(m.version(), 1, "one write, the temporaries' not counted");
    // the output as both inputs: the first read in place, the second staged
    let a = f32s(dev, &[1.0, -2.0, 3.0], &[3])?;
    a.mul_(&a)?;
    assert_eq!(a.to_vec::<f32>()?, vec![1.0, 4.0, 9.0]);
    // an input read in another dtype (i64 into f32), broadcast
    let x = f32s(dev, &[0.5, 1.5, 2.5, 3.5, 4.5, 5.5], &[2, 3])?;
    let ints = Tensor::arange(0, 3, dev)?;
    x.add_(&ints)?;
    assert_eq!(
        x.to_vec2::<f32>()?,
        vec![vec![0.5, 2.5, 4.5], vec![3.5, 5.5, 7.5]]
    );
    assert_eq!(
        (ints.dtype(), ints.to_vec::<i64>()?),
        (DType::I64, vec![0, 1, 2])
    );
    // an output produced in another dtype (a comparison's bool into f32),
    // written through a transposed view
    let y = Tensor::zeros([3, 2], DType::F32, dev)?;
    y.copy_(&f32s(dev, &[0.0, 1.0, 0.0, 2.0, 0.0, 3.0], &[3, 2])?)?;
    y.t()?.eq_(0.0)?;
    assert_eq!(y.to_vec::<f32>()?, vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
    // an out-of-place op over an int and a float operand (the int staged)
    let z = ints.mul(&f32s(dev, &[0.5], &[1])?)?;
    assert_eq!(
        (z.dtype(), z.to_vec::<f32>()?),
        (DType::F32, vec![0.0, 0.5, 1.0])
    );
    Ok(())
}

test_device!(copy_broadcasts_and_casts);
fn copy_broadcasts_and_casts(dev: &Device) -> Result<()> {
    // f32 [3] into i32 [2, 3]: broadcast rows, truncate toward zero
    let src = f32s(dev, &[1.7, -2.5, 3.0], &[3])?;
    let dst = Tensor::zeros([2, 3], DType::I32, dev)?;
    let r = dst.copy_(&src)?;
    assert!(r.is_same(&dst));
    let want = src.to_dtype(DType::I32)?.expand([2, 3])?.to_vec2::<i32>()?;
    assert_eq!(dst.to_vec2::<i32>()?, want);
    assert_eq!(dst.to_vec2::<i32>()?, vec![vec![1, -2, 3], vec![1, -2, 3]]);
    assert_eq!(dst.version(), 1);
    assert_eq!(src.version(), 0);

    // bool into f16 through a transposed view
    let base = Tensor::zeros([3, 2], DType::F16, dev)?;
    let mask = Tensor::from_vec(vec![true, false, true], [3], dev)?;
    base.t()?.copy_(&mask)?;
    let got: Vec<f32> = base
        .to_dtype(DType::F32)?
        .to_vec::<f32>()?
        .into_iter()
        .collect();
    assert_eq!(got, vec![1.0, 1.0, 0.0, 0.0, 1.0, 1.0]);

    // a column [2, 1] broadcast across
    let col = Tensor::from_vec(vec![5i64, 6], [2, 1], dev)?;
    let d = Tensor::zeros([2, 3], DType::F64, dev)?;
    d.copy_(&col)?;
    assert_eq!(
        d.to_vec2::<f64>()?,
        vec![vec![5.0, 5.0, 5.0], vec![6.0, 6.0, 6.0]]
    );

    // src that does not broadcast to dst
    let err = d.copy_(&Tensor::zeros([4], DType::F64, dev)?).unwrap_err();
    assert!(
        matches!(err, Error::ShapeMismatch { op: "copy_", .. }),
        "{err:?}"
    );
    // src that would grow dst
    let err = Tensor::zeros([3], DType::F64, dev)?.copy_(&d).unwrap_err();
    assert!(
        matches!(err, Error::ShapeMismatch { op: "copy_", .. }),
        "{err:?}"
    );
    Ok(())
}

test_device!(masked_fill_inplace_matches_out_of_place);
fn masked_fill_inplace_matches_out_of_place(dev: &Device) -> Result<()> {
    let a = f32s(dev, &A, &[2, 3])?;
    let mask = Tensor::from_vec(vec![true, false, true], [3], dev)?;
    let want = a.masked_fill(&mask, -9.0)?.to_vec::<f32>()?;
    assert_eq!(want, vec![-9.0, -0.5, -9.0, -9.0, 2.0, -9.0]);
    let t = a.clone()?;
    let r = t.masked_fill_(&mask, -9.0)?;
    assert!(r.is_same(&t));
    assert_eq!(t.to_vec::<f32>()?, want);
    assert_eq!(t.version(), 1);
    // mask from a comparison of the tensor itself
    let t = a.clone()?;
    t.masked_fill_(&t.lt(0.0)?, 0.0)?;
    assert_eq!(t.to_vec::<f32>()?, a.relu()?.to_vec::<f32>()?);
    // a non-bool mask is refused
    let err = t.masked_fill_(&t, 0.0).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DTypeMismatch {
                op: "masked_fill",
                expected: DType::Bool,
                found: DType::F32,
                ..
            }
        ),
        "{err:?}"
    );
    Ok(())
}

// cpu only: on an asynchronous device the kernel error is deferred to the
// next synchronisation and poisons the target (tests/faults.rs covers that).
#[test]
fn failed_kernel_leaves_target_untouched() -> Result<()> {
    let dev = &Device::Cpu;
    let i = Tensor::arange(1, 4, dev)?;
    let err = i.pow_(-1).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { op: "pow", .. }),
        "{err:?}"
    );
    assert_eq!(i.to_vec::<i64>()?, vec![1, 2, 3]);
    assert_eq!(i.version(), 0);
    assert_eq!(i.last_write_location(), None);
    i.pow_(2)?;
    assert_eq!(i.to_vec::<i64>()?, vec![1, 4, 9]);
    Ok(())
}

test_device!(chained_inplace_ops);
fn chained_inplace_ops(dev: &Device) -> Result<()> {
    let t = Tensor::arange(0.0, 4.0, dev)?;
    t.add_(1.0)?
        .mul_(2.0)?
        .sub_(&Tensor::ones([4], DType::F32, dev)?)?;
    assert_eq!(t.to_vec::<f32>()?, vec![1.0, 3.0, 5.0, 7.0]);
    assert_eq!(t.version(), 3);
    Ok(())
}

// ---------------------------------------------------------------------------
// Refused writes
// ---------------------------------------------------------------------------

test_device!(writing_into_expanded_is_overlapping_write);
fn writing_into_expanded_is_overlapping_write(dev: &Device) -> Result<()> {
    let base = Tensor::ones([1, 3], DType::F32, dev)?;
    let e = base.expand([2, 3])?;
    let other = Tensor::ones([2, 3], DType::F32, dev)?;
    let mask = Tensor::ones([2, 3], DType::Bool, dev)?;
    let results: Vec<(&str, Result<&Tensor>)> = vec![
        ("add", e.add_(1.0)),
        ("mul", e.mul_(&other)),
        ("neg", e.neg_()),
        ("exp", e.exp_()),
        ("clamp", e.clamp_(0.0, 1.0)),
        ("fill_", e.fill_(2.0)),
        ("zero_", e.zero_()),
        ("copy_", e.copy_(&other)),
        ("masked_fill", e.masked_fill_(&mask, 0.0)),
    ];
    for (name, r) in results {
        match r {
            Err(Error::OverlappingWrite { op, shape, strides }) => {
                assert_eq!(op, name);
                assert_eq!(shape, vec![2, 3]);
                assert_eq!(strides, vec![0, 1]);
            }
            other => panic!("{name}: expected OverlappingWrite, got {other:?}"),
        }
    }
    let msg = e.add_(1.0).unwrap_err().to_string();
    assert!(msg.contains("[2, 3]") && msg.contains("[0, 1]"), "{msg}");
    assert!(msg.contains("expand"), "{msg}");
    // nothing was written and the version did not move
    assert_eq!(base.to_vec::<f32>()?, vec![1.0; 3]);
    assert_eq!(base.version(), 0);
    // writing the base itself is fine
    base.add_(1.0)?;
    assert_eq!(e.to_vec2::<f32>()?, vec![vec![2.0; 3]; 2]);
    // an expand of size-1 dims only does not overlap
    let one = Tensor::zeros([1], DType::F32, dev)?.expand([1, 1])?;
    one.add_(3.0)?;
    assert_eq!(one.to_vec2::<f32>()?, vec![vec![3.0]]);
    Ok(())
}

test_device!(int_add_float_is_dtype_mismatch);
fn int_add_float_is_dtype_mismatch(dev: &Device) -> Result<()> {
    let i = Tensor::arange(0, 3, dev)?;
    let f = f32s(dev, &[0.5, 0.5, 0.5], &[3])?;
    let err = i.add_(&f).unwrap_err();
    match &err {
        Error::DTypeMismatch {
            op,
            expected,
            found,
            ..
        } => {
            assert_eq!(*op, "add");
            assert_eq!(*expected, DType::I64);
            assert_eq!(*found, DType::F32);
        }
        other => panic!("expected DTypeMismatch, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("int64") && msg.contains("float32"), "{msg}");

    let err = i.add_(1.5).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DTypeMismatch {
                op: "add",
                expected: DType::I64,
                found: DType::F32,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("int64") && msg.contains("float32"), "{msg}");

    // float-only unary ops and true division on an int tensor
    assert!(matches!(
        i.exp_().unwrap_err(),
        Error::DTypeMismatch {
            op: "exp",
            expected: DType::I64,
            found: DType::F32,
            ..
        }
    ));
    assert!(matches!(
        i.div_(2).unwrap_err(),
        Error::DTypeMismatch { op: "div", .. }
    ));
    // into bool
    let b = Tensor::zeros([3], DType::Bool, dev)?;
    assert!(matches!(
        b.add_(&i).unwrap_err(),
        Error::DTypeMismatch {
            op: "add",
            expected: DType::Bool,
            found: DType::I64,
            ..
        }
    ));
    // nothing was written
    assert_eq!(i.to_vec::<i64>()?, vec![0, 1, 2]);
    assert_eq!(i.version(), 0);
    // the out-of-place op promotes instead
    assert_eq!(i.add(1.5)?.to_vec::<f32>()?, vec![1.5, 2.5, 3.5]);
    // int add_ int scalar and int tensor are fine
    i.add_(2)?;
    i.add_(&Tensor::from_vec(vec![1i32, 1, 1], [3], dev)?)?;
    assert_eq!(i.to_vec::<i64>()?, vec![3, 4, 5]);
    Ok(())
}

test_device!(f16_add_f32_works);
fn f16_add_f32_works(dev: &Device) -> Result<()> {
    let h = Tensor::ones([3], DType::F16, dev)?;
    let f = f32s(dev, &[0.5, 1.0, 2.0], &[3])?;
    h.add_(&f)?;
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(
        h.to_vec::<half::f16>()?,
        vec![
            half::f16::from_f32(1.5),
            half::f16::from_f32(2.0),
            half::f16::from_f32(3.0)
        ]
    );
    h.mul_(2.0)?;
    assert_eq!(
        h.to_dtype(DType::F32)?.to_vec::<f32>()?,
        vec![3.0, 4.0, 6.0]
    );
    let bf = Tensor::ones([2], DType::BF16, dev)?;
    bf.add_(&Tensor::ones([2], DType::F64, dev)?)?;
    assert_eq!(bf.to_dtype(DType::F32)?.to_vec::<f32>()?, vec![2.0, 2.0]);
    // f32 add_ f64
    let x = f32s(dev, &[1.0, 2.0], &[2])?;
    x.add_(&Tensor::from_vec(vec![0.25f64, 0.5], [2], dev)?)?;
    assert_eq!(x.to_vec::<f32>()?, vec![1.25, 2.5]);
    assert_eq!(x.dtype(), DType::F32);
    Ok(())
}

test_device!(full_self_overlap_works);
fn full_self_overlap_works(dev: &Device) -> Result<()> {
    let x = f32s(dev, &[1.0, 2.0, 3.0], &[3])?;
    x.add_(&x)?;
    assert_eq!(x.to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
    x.mul_(&x)?;
    assert_eq!(x.to_vec::<f32>()?, vec![4.0, 16.0, 36.0]);
    x.sub_(&x.alias())?;
    assert_eq!(x.to_vec::<f32>()?, vec![0.0; 3]);
    assert_eq!(x.version(), 3);
    // an identical-layout view of itself
    let m = Tensor::arange(0.0, 4.0, dev)?.view([2, 2])?;
    m.add_(&m.view([2, 2])?)?;
    assert_eq!(m.to_vec2::<f32>()?, vec![vec![0.0, 2.0], vec![4.0, 6.0]]);
    // copy_ from itself
    m.copy_(&m)?;
    assert_eq!(m.to_vec2::<f32>()?, vec![vec![0.0, 2.0], vec![4.0, 6.0]]);
    // disjoint views of one storage
    m.select(0, 0)?.add_(&m.select(0, 1)?)?;
    assert_eq!(m.to_vec2::<f32>()?, vec![vec![4.0, 8.0], vec![4.0, 6.0]]);
    Ok(())
}

test_device!(partial_overlap_is_refused);
fn partial_overlap_is_refused(dev: &Device) -> Result<()> {
    let a = Tensor::arange(0.0, 4.0, dev)?.view([2, 2])?;
    let err = a.add_(&a.t()?).unwrap_err();
    assert!(
        matches!(
            err,
            Error::PartialOverlap {
                op: "add",
                arg: "other"
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("add") && msg.contains("clone"), "{msg}");
    assert_eq!(a.version(), 0);
    assert_eq!(a.to_vec2::<f32>()?, vec![vec![0.0, 1.0], vec![2.0, 3.0]]);

    // shifted copy within one storage
    let x = Tensor::arange(0.0, 4.0, dev)?;
    let err = x.slice(0, 1..)?.copy_(&x.slice(0, ..3)?).unwrap_err();
    assert!(
        matches!(
            err,
            Error::PartialOverlap {
                op: "copy_",
                arg: "src"
            }
        ),
        "{err:?}"
    );
    // the fix the message suggests works
    a.add_(&a.t()?.clone()?)?;
    assert_eq!(a.to_vec2::<f32>()?, vec![vec![0.0, 3.0], vec![3.0, 6.0]]);
    Ok(())
}

// ---------------------------------------------------------------------------
// Version counters and the call site of the last write
// ---------------------------------------------------------------------------

test_device!(every_inplace_op_bumps_version_by_one);
fn every_inplace_op_bumps_version_by_one(dev: &Device) -> Result<()> {
    let t = f32s(dev, &[0.5, 1.0, 2.0, 4.0], &[4])?;
    let o = f32s(dev, &[1.0, 1.0, 1.0, 1.0], &[4])?;
    let mask = Tensor::from_vec(vec![false, false, false, false], [4], dev)?;
    let mut expect = 0;
    let mut step = |r: Result<&Tensor>, name: &str| -> Result<()> {
        r?;
        expect += 1;
        assert_eq!(t.version(), expect, "{name} bumps the version by one");
        Ok(())
    };
    step(t.add_(&o), "add_")?;
    step(t.sub_(&o), "sub_")?;
    step(t.mul_(1.0), "mul_")?;
    step(t.div_(1.0), "div_")?;
    step(t.pow_(1.0), "pow_")?;
    step(t.maximum_(&o), "maximum_")?;
    step(t.minimum_(4.0), "minimum_")?;
    step(t.neg_(), "neg_")?;
    step(t.abs_(), "abs_")?;
    step(t.relu_(), "relu_")?;
    step(t.exp_(), "exp_")?;
    step(t.log_(), "log_")?;
    step(t.sqrt_(), "sqrt_")?;
    step(t.sigmoid_(), "sigmoid_")?;
    step(t.tanh_(), "tanh_")?;
    step(t.clamp_(0.0, 1.0), "clamp_")?;
    step(t.clamp_min_(0.0), "clamp_min_")?;
    step(t.clamp_max_(1.0), "clamp_max_")?;
    step(t.fill_(1.0), "fill_")?;
    step(t.zero_(), "zero_")?;
    step(t.copy_(&o), "copy_")?;
    step(t.masked_fill_(&mask, 0.0), "masked_fill_")?;
    step(t.eq_(&o), "eq_")?;
    step(t.ne_(1.0), "ne_")?;
    step(t.lt_(1.0), "lt_")?;
    step(t.le_(1.0), "le_")?;
    step(t.gt_(1.0), "gt_")?;
    step(t.ge_(1.0), "ge_")?;
    assert_eq!(t.version(), 28);
    // the operands were only read
    assert_eq!(o.version(), 0);
    assert_eq!(mask.version(), 0);
    Ok(())
}

test_device!(views_share_the_version_counter);
fn views_share_the_version_counter(dev: &Device) -> Result<()> {
    let base = Tensor::zeros([2, 3], DType::F32, dev)?;
    let v1 = base.select(0, 0)?;
    let v2 = base.t()?;
    let v3 = base.view([6])?;
    let al = base.alias();
    v1.add_(1.0)?;
    v2.mul_(2.0)?;
    v3.fill_(0.0)?;
    al.sub_(1.0)?;
    for t in [&base, &v1, &v2, &v3, &al] {
        assert_eq!(t.version(), 4);
    }
    // a view made after the writes sees the same counter
    assert_eq!(base.narrow(1, 1, 1)?.version(), 4);
    Ok(())
}

test_device!(out_of_place_ops_do_not_bump);
fn out_of_place_ops_do_not_bump(dev: &Device) -> Result<()> {
    let t = f32s(dev, &[1.0, 2.0, 3.0, 4.0], &[2, 2])?;
    t.add_(0.0)?;
    assert_eq!(t.version(), 1);
    let _ = t.add(&t)?;
    let _ = t.mul(2.0)?;
    let _ = t.exp()?;
    let _ = t.clamp(0.0, 1.0)?;
    let _ = t.sum()?;
    let _ = t.matmul(&t)?;
    let _ = t.t()?;
    let _ = t.view([4])?;
    let _ = t.contiguous()?;
    let _ = t.t()?.contiguous()?;
    let _ = t.to_dtype(DType::F64)?;
    let _ = t.masked_fill(&t.gt(2.0)?, 0.0)?;
    let _ = Tensor::cat(&[&t, &t], 0)?;
    let _ = t.to_vec::<f32>()?;
    let _ = t.clone()?;
    assert_eq!(t.version(), 1);
    Ok(())
}

test_device!(clone_starts_at_version_zero);
fn clone_starts_at_version_zero(dev: &Device) -> Result<()> {
    let t = Tensor::zeros([3], DType::F32, dev)?;
    assert_eq!(t.version(), 0);
    assert_eq!(t.last_write_location(), None);
    t.add_(1.0)?;
    t.add_(1.0)?;
    t.add_(1.0)?;
    assert_eq!(t.version(), 3);
    let c = t.clone()?;
    assert_eq!(c.version(), 0);
    assert_eq!(c.last_write_location(), None);
    assert_eq!(c.to_vec::<f32>()?, vec![3.0; 3]);
    let tc = t.t()?.contiguous()?; // 1-D t() is contiguous: alias of a view
    assert_eq!(tc.version(), 3);
    // a fresh copy from contiguous() of a transposed tensor starts at 0 too
    let m = Tensor::zeros([2, 2], DType::F32, dev)?;
    m.add_(1.0)?;
    assert_eq!(m.t()?.contiguous()?.version(), 0);
    Ok(())
}

test_device!(last_write_location_is_the_caller);
fn last_write_location_is_the_caller(dev: &Device) -> Result<()> {
    let t = Tensor::zeros([2, 3], DType::F32, dev)?;
    let (r, line) = (t.add_(1.0).map(|_| ()), line!());
    r?;
    let loc = t.last_write_location().expect("written");
    assert_eq!(loc.file(), file!());
    assert_eq!(loc.line(), line);

    // through a view: recorded on the shared storage, seen from the base
    let v = t.t()?;
    let (r, line) = (v.mul_(2.0).map(|_| ()), line!());
    r?;
    assert_eq!(t.last_write_location().map(|l| l.line()), Some(line));
    assert_eq!(v.last_write_location().map(|l| l.line()), Some(line));

    let (r, line) = (t.fill_(1.0).map(|_| ()), line!());
    r?;
    assert_eq!(t.last_write_location().map(|l| l.line()), Some(line));
    let src = t.clone()?;
    let (r, line) = (t.copy_(&src).map(|_| ()), line!());
    r?;
    assert_eq!(t.last_write_location().map(|l| l.line()), Some(line));
    let (r, line) = (t.exp_().map(|_| ()), line!());
    r?;
    assert_eq!(t.last_write_location().map(|l| l.line()), Some(line));
    let (r, line) = (t.clamp_max_(2.0).map(|_| ()), line!());
    r?;
    assert_eq!(t.last_write_location().map(|l| l.line()), Some(line));
    let (r, line) = (t.zero_().map(|_| ()), line!());
    r?;
    assert_eq!(t.last_write_location().map(|l| l.line()), Some(line));
    // reading and out-of-place ops do not move it
    let _ = t.add(1.0)?;
    let _ = src.to_vec::<f32>()?;
    assert_eq!(t.last_write_location().map(|l| l.line()), Some(line));
    assert_eq!(src.last_write_location(), None);
    let (r, line) = (t.select(0, 1)?.fill_(3.0).map(|_| ()), line!());
    r?;
    let loc = t.last_write_location().expect("written");
    assert_eq!((loc.file(), loc.line()), (file!(), line));

    let m = Tensor::zeros([3], DType::Bool, dev)?;
    let (r, line) = (t.masked_fill_(&m, 1.0).map(|_| ()), line!());
    r?;
    assert_eq!(t.last_write_location().map(|l| l.line()), Some(line));

    // a refused write does not move the location
    let e = Tensor::zeros([1], DType::F32, dev)?;
    let (r, line) = (e.add_(1.0).map(|_| ()), line!());
    r?;
    assert!(e.expand([3])?.add_(1.0).is_err());
    assert_eq!(e.last_write_location().map(|l| l.line()), Some(line));
    assert_eq!(e.version(), 1);
    Ok(())
}

// ---------------------------------------------------------------------------
// The harness itself (common::test_device!)
// ---------------------------------------------------------------------------

/// A case that leaves a tensor alive on its device.
fn leaks_one_tensor(dev: &Device) -> Result<()> {
    std::mem::forget(Tensor::zeros([8], DType::F32, dev)?);
    Ok(())
}

#[test]
#[should_panic(expected = "live memory left on emu:")]
fn harness_leak_check_fails_a_leaking_device_case() {
    let _ = common::run_case(common::fresh_emu(), leaks_one_tensor);
}

static CUDA_CASE_RAN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn records_that_it_ran(_dev: &Device) -> Result<()> {
    CUDA_CASE_RAN.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

#[test]
fn harness_skips_an_unavailable_cuda_and_fails_an_unavailable_emu() -> Result<()> {
    let cuda = Device::Cuda(0);
    let available = cuda.check_available().is_ok();
    common::run_case(cuda, records_that_it_ran)?;
    // skipped (after printing why) exactly when this build has no CUDA
    assert_eq!(
        CUDA_CASE_RAN.load(std::sync::atomic::Ordering::SeqCst),
        available
    );
    // a missing emulated device is an error, never a silent skip
    common::setup_emulated(common::EMU_DEVICES);
    let missing = Device::Emulated(common::EMU_DEVICES);
    let err = common::run_case(missing, records_that_it_ran).unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    Ok(())
}

// ---------------------------------------------------------------------------
// Lending host memory as a slice (`with_host_data`, `with_host_data_mut`)
// ---------------------------------------------------------------------------

#[test]
fn lent_host_memory_is_the_tensor_itself_and_a_lent_write_is_a_write_in_place() -> Result<()> {
    let cpu = Device::Cpu;
    let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4], &cpu)?;
    let view = t.slice(0, 1..3)?;
    // a contiguous view lends its own window of the storage
    assert_eq!(view.with_host_data(|xs: &[f32]| xs.to_vec())?, [2.0, 3.0]);
    let line = line!() + 1;
    let n = view.with_host_data_mut(|xs: &mut [f32]| {
        xs.iter_mut().for_each(|x| *x *= 10.0);
        xs.len()
    })?;
    assert_eq!(n, 2);
    // the write is in the tensor, seen through every handle, and counted
    assert_eq!(t.to_vec::<f32>()?, [1.0, 20.0, 30.0, 4.0]);
    assert_eq!((t.version(), view.version()), (1, 1));
    let site = t
        .last_write_location()
        .expect("a lent write records its site");
    assert_eq!((site.file(), site.line()), (file!(), line));
    // reading bumps nothing
    t.with_host_data(|_: &[f32]| ())?;
    assert_eq!(t.version(), 1);
    // bool is lent as bytes of 0 and 1
    let b = Tensor::from_vec(vec![true, false, true], [3], &cpu)?;
    assert_eq!(b.with_host_data(|xs: &[u8]| xs.to_vec())?, [1, 0, 1]);
    b.with_host_data_mut(|xs: &mut [u8]| xs[1] = 1)?;
    assert_eq!(b.to_vec::<bool>()?, [true, true, true]);
    Ok(())
}

#[test]
fn an_op_on_lent_memory_from_inside_the_closure_is_an_error_not_a_deadlock() -> Result<()> {
    let cpu = Device::Cpu;
    let emu = common::fresh_emu();
    let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4], &cpu)?;
    let other = Tensor::ones([4], DType::F32, &cpu)?;
    let is_lend_error = |r: Result<Tensor>| match r {
        Err(e) => {
            let m = e.to_string();
            assert!(
                m.contains("is lent, on this thread") && m.contains("deadlock"),
                "{m}"
            );
        }
        Ok(_) => panic!("an op on lent memory ran"),
    };
    // reads, writes, views and copies of the lent storage, while lent for reading
    t.with_host_data(|xs: &[f32]| {
        assert_eq!(xs.len(), 4);
        is_lend_error(t.add(&other));
        is_lend_error(t.slice(0, 1..3)?.sum());
        is_lend_error(t.to(&emu));
        assert!(t.add_(&other).is_err());
        assert!(t.to_vec::<f32>().is_err());
        assert!(t.with_host_data(|_: &[f32]| ()).is_err());
        // other tensors stay usable, and can be lent too
        assert_eq!(other.with_host_data(|o: &[f32]| o[0])?, 1.0);
        assert_eq!(other.add(&other)?.to_vec::<f32>()?, [2.0; 4]);
        Ok::<(), Error>(())
    })??;
    // ... and while lent for writing
    tensorguard::autograd::no_grad(|| {
        t.with_host_data_mut(|xs: &mut [f32]| {
            xs[0] = 10.0;
            is_lend_error(t.mul(&other));
            is_lend_error(t.to(&emu));
            assert!(other.copy_(&t).is_err());
        })
    })?;
    // once the closure returned, the tensor is an ordinary tensor again
    assert_eq!(t.add(&other)?.to_vec::<f32>()?, [11.0, 3.0, 4.0, 5.0]);
    // another thread is not refused: its write waits for the closure
    let t2 = t.alias(); // a second handle of the same tensor
    let h = t.with_host_data(|_: &[f32]| {
        std::thread::spawn(move || {
            t2.add_(&Tensor::ones([4], DType::F32, &Device::Cpu)?)
                .map(|_| ())
        })
    })?;
    h.join().expect("the other thread does not panic")?;
    assert_eq!(t.to_vec::<f32>()?, [11.0, 3.0, 4.0, 5.0]);
    common::assert_no_live_memory(&emu);
    Ok(())
}

#[test]
fn lending_refuses_device_memory_strided_views_other_dtypes_and_tracked_writes() -> Result<()> {
    let emu = common::fresh_emu();
    let e = Tensor::zeros([4], DType::F32, &emu)?;
    let err = e.with_host_data(|_: &[f32]| ()).unwrap_err().to_string();
    assert!(
        err.contains(&emu.to_string()) && err.contains("to(&Device::Cpu)"),
        "{err}"
    );
    assert!(e.with_host_data_mut(|_: &mut [f32]| ()).is_err());
    drop(e);
    common::assert_no_live_memory(&emu);

    let cpu = Device::Cpu;
    let m = Tensor::zeros([2, 3], DType::F32, &cpu)?.t()?;
    let err = m.with_host_data(|_: &[f32]| ()).unwrap_err().to_string();
    assert!(
        err.contains("not contiguous") && err.contains("[1, 3]"),
        "{err}"
    );
    let err = m.contiguous()?.with_host_data(|_: &[f64]| ()).unwrap_err();
    assert!(
        matches!(err, Error::DTypeMismatch { .. }) && err.to_string().contains("to_dtype"),
        "{err}"
    );
    // u8 reads bool, never another dtype
    assert!(Tensor::zeros([2], DType::I32, &cpu)?
        .with_host_data(|_: &[u8]| ())
        .is_err());

    // autograd cannot see a write through a slice: refused while it records
    let w = Tensor::ones([3], DType::F32, &cpu)?.requires_grad(true)?;
    let err = w
        .with_host_data_mut(|_: &mut [f32]| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("requires grad") && err.contains("no_grad"),
        "{err}"
    );
    assert_eq!(w.version(), 0);
    // reading it is fine, and so is an optimizer-style write under no_grad
    assert_eq!(w.with_host_data(|xs: &[f32]| xs.len())?, 3);
    tensorguard::autograd::no_grad(|| w.with_host_data_mut(|xs: &mut [f32]| xs[0] = 5.0))?;
    assert_eq!((w.to_vec::<f32>()?[0], w.version()), (5.0, 1));
    Ok(())
}

test_device!(lending_waits_for_a_pending_copy_into_pinned_memory);
fn lending_waits_for_a_pending_copy_into_pinned_memory(dev: &Device) -> Result<()> {
    let nb = tensorguard::transfer::CopyOpts {
        non_blocking: true,
        ..Default::default()
    };
    let mut pending = 0;
    // slow work first, so the copy queued after it is still pending: the
    // stream is held on emu (released while the lend waits), and the GPU
    // gets products large enough to outlast the host's next steps
    let n = if matches!(dev, Device::Cuda(_)) {
        2048
    } else {
        128
    };
    for round in 0..20 {
        let hold = match dev {
            Device::Emulated(_) => Some(common::StreamHold::new(dev)?),
            _ => None,
        };
        let a = Tensor::full([n, n], 1.0 / n as f32, DType::F32, dev)?;
        let x = a.matmul(&a)?.matmul(&a)?.add(round as f32)?;
        let host = x.to_with(&Device::Cpu, nb)?;
        pending += usize::from(!tensorguard::device::Stream::current(dev).query());
        if let Some(h) = &hold {
            h.release_later(std::time::Duration::from_millis(5));
        }
        let sum =
            host.with_host_data(|xs: &[f32]| xs.iter().map(|&v| f64::from(v)).sum::<f64>())?;
        let nf = n as f64;
        let want = nf * nf * (1.0 / nf + f64::from(round));
        assert!(
            (sum - want).abs() < 1e-2 * want.max(1.0),
            "round {round}: {sum} vs {want}"
        );
        // a lent write waits too, and lands after the copy
        let y = x.to_with(&Device::Cpu, nb)?;
        y.with_host_data_mut(|xs: &mut [f32]| xs[0] = -1.0)?;
        assert_eq!(y.to_vec::<f32>()?[0], -1.0);
    }
    // on a device the lend found the copy still queued (the wait was needed)
    assert!(
        dev.is_cpu() || pending >= 5,
        "the copy was pending at the lend in only {pending} of 20 rounds"
    );
    Ok(())
}
