//! Every user mistake returns the right `Error` variant, and its message is
//! a complete sentence that names the op and the values involved, on every
//! device.

mod common;

use tensorguard::{DType, Device, Error, Result, Tensor};

/// The device of the tests about sizes past any memory (the others are
/// written once and run on every device by `test_device!`).
const DEV: Device = Device::Cpu;

/// The message starts with `op:` (when given), ends a sentence, and
/// contains every needle.
#[track_caller]
fn assert_message(err: &Error, op: Option<&str>, needles: &[&str]) {
    let msg = err.to_string();
    if let Some(op) = op {
        assert!(
            msg.starts_with(&format!("{op}: ")),
            "message should start with the op `{op}`: {msg}"
        );
    }
    assert!(
        msg.trim_end().ends_with('.'),
        "message should end a sentence: {msg}"
    );
    let words = msg.split_whitespace().count();
    assert!(words >= 6, "message should be a full sentence: {msg}");
    for n in needles {
        assert!(msg.contains(n), "message should mention `{n}`: {msg}");
    }
}

fn f32_tensor(dev: &Device, shape: &[usize]) -> Result<Tensor> {
    Tensor::zeros(shape, DType::F32, dev)
}

common::test_device!(broadcasting_mismatch);

fn broadcasting_mismatch(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = f32_tensor(&dev, &[2, 3])?;
    let b = f32_tensor(&dev, &[4])?;
    let err = a.add(&b).unwrap_err();
    match &err {
        Error::ShapeMismatch { op, lhs, rhs, .. } => {
            assert_eq!(*op, "add");
            assert_eq!(lhs, &vec![2, 3]);
            assert_eq!(rhs, &vec![4]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    assert_message(&err, Some("add"), &["[2, 3]", "[4]", "broadcast", "3", "4"]);

    let err = a.mul(&f32_tensor(&dev, &[3, 2])?).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "mul", .. }));
    assert_message(&err, Some("mul"), &["[2, 3]", "[3, 2]"]);

    // an in-place op cannot grow its target
    let err = b.add_(&f32_tensor(&dev, &[2, 4])?).unwrap_err();
    match &err {
        Error::ShapeMismatch { op, lhs, rhs, .. } => {
            assert_eq!(*op, "add");
            assert_eq!(lhs, &vec![4]);
            assert_eq!(rhs, &vec![2, 4]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    assert_message(&err, Some("add"), &["[4]", "[2, 4]", "in-place"]);
    Ok(())
}

common::test_device!(matmul_inner_dim_mismatch);

fn matmul_inner_dim_mismatch(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = f32_tensor(&dev, &[2, 3])?;
    let b = f32_tensor(&dev, &[4, 5])?;
    let err = a.matmul(&b).unwrap_err();
    match &err {
        Error::ShapeMismatch { op, lhs, rhs, .. } => {
            assert_eq!(*op, "matmul");
            assert_eq!(lhs, &vec![2, 3]);
            assert_eq!(rhs, &vec![4, 5]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    assert_message(&err, Some("matmul"), &["[2, 3]", "[4, 5]", "3 vs 4"]);

    // vector @ matrix
    let err = f32_tensor(&dev, &[5])?.matmul(&a).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "matmul", .. }));
    assert_message(&err, Some("matmul"), &["[5]", "[2, 3]", "5 vs 2"]);

    // batch dims that do not broadcast
    let err = f32_tensor(&dev, &[2, 2, 3])?
        .matmul(&f32_tensor(&dev, &[3, 3, 4])?)
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "matmul", .. }));

    // mm needs 2-D
    let err = f32_tensor(&dev, &[3])?.mm(&a).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "mm", .. }));
    assert_message(&err, Some("mm"), &["[3]", "[2, 3]"]);
    Ok(())
}

common::test_device!(matmul_dtype_mismatch);

fn matmul_dtype_mismatch(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = f32_tensor(&dev, &[2, 3])?;
    let b = Tensor::zeros([3, 2], DType::I64, &dev)?;
    let err = a.matmul(&b).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DTypeMismatch {
                op: "matmul",
                expected: DType::F32,
                found: DType::I64,
                ..
            }
        ),
        "{err:?}"
    );
    assert_message(&err, Some("matmul"), &["float32", "int64"]);
    Ok(())
}

common::test_device!(cat_shape_mismatch);

fn cat_shape_mismatch(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = f32_tensor(&dev, &[2, 3])?;
    let b = f32_tensor(&dev, &[2, 4])?;
    let err = Tensor::cat(&[&a, &b], 0).unwrap_err();
    match &err {
        Error::ShapeMismatch { op, lhs, rhs, .. } => {
            assert_eq!(*op, "cat");
            assert_eq!(lhs, &vec![2, 3]);
            assert_eq!(rhs, &vec![2, 4]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    assert_message(&err, Some("cat"), &["[2, 3]", "[2, 4]", "dimension 0"]);
    // along dim 1 the same pair is fine
    assert_eq!(Tensor::cat(&[&a, &b], 1)?.shape(), &[2, 7]);
    // different ranks
    let err = Tensor::cat(&[&a, &f32_tensor(&dev, &[2, 3, 1])?], 0).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "cat", .. }));
    // an empty list
    let err = Tensor::cat(&[], 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "cat", .. }));
    assert_message(&err, Some("cat"), &["empty"]);
    // stack needs equal shapes
    let err = Tensor::stack(&[&a, &b], 0).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "stack", .. }));
    assert_message(&err, Some("stack"), &["[2, 3]", "[2, 4]"]);
    Ok(())
}

common::test_device!(select_index_out_of_range);

fn select_index_out_of_range(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = f32_tensor(&dev, &[2, 3])?;
    let err = t.select(1, 3).unwrap_err();
    match &err {
        Error::IndexOutOfRange {
            op, index, size, ..
        } => {
            assert_eq!(*op, "select");
            assert_eq!(*index, 3);
            assert_eq!(*size, 3);
        }
        other => panic!("expected IndexOutOfRange, got {other:?}"),
    }
    assert_message(
        &err,
        Some("select"),
        &["index 3", "size 3", "dimension 1", "-3 to 2"],
    );
    let err = t.select(0, -3).unwrap_err();
    assert!(matches!(
        err,
        Error::IndexOutOfRange {
            op: "select",
            index: -3,
            size: 2,
            ..
        }
    ));
    Ok(())
}

// on the cpu only: the kernel raises it, so a device reports it at the next
// synchronisation (tests/faults.rs), as CUDA does
#[test]
fn index_select_bad_index_value() -> Result<()> {
    let t = Tensor::arange(0.0, 6.0, &DEV)?.view([2, 3])?;
    let idx = Tensor::from_vec(vec![0i64, 5, 1], [3], &DEV)?;
    let err = t.index_select(1, &idx).unwrap_err();
    match &err {
        Error::IndexOutOfRange {
            op, index, size, ..
        } => {
            assert_eq!(*op, "index_select");
            assert_eq!(*index, 5);
            assert_eq!(*size, 3);
        }
        other => panic!("expected IndexOutOfRange, got {other:?}"),
    }
    assert_message(&err, Some("index_select"), &["index 5", "size 3", "0 to 2"]);
    let neg = Tensor::from_vec(vec![-1i64], [1], &DEV)?;
    let err = t.index_select(0, &neg).unwrap_err();
    assert!(matches!(
        err,
        Error::IndexOutOfRange {
            op: "index_select",
            index: -1,
            size: 2,
            ..
        }
    ));
    // a good index works
    let ok = Tensor::from_vec(vec![2i64, 0], [2], &DEV)?;
    assert_eq!(
        t.index_select(1, &ok)?.to_vec2::<f32>()?,
        vec![vec![2.0, 0.0], vec![5.0, 3.0]]
    );
    Ok(())
}

// on the cpu only: the kernel raises it, so a device reports it at the next
// synchronisation (tests/faults.rs), as CUDA does
#[test]
fn gather_bad_index_value() -> Result<()> {
    let t = Tensor::arange(0.0, 6.0, &DEV)?.view([2, 3])?;
    let idx = Tensor::from_vec(vec![0i64, 1, 2, 3], [2, 2], &DEV)?;
    let err = t.gather(1, &idx).unwrap_err();
    match &err {
        Error::IndexOutOfRange {
            op, index, size, ..
        } => {
            assert_eq!(*op, "gather");
            assert_eq!(*index, 3);
            assert_eq!(*size, 3);
        }
        other => panic!("expected IndexOutOfRange, got {other:?}"),
    }
    assert_message(&err, Some("gather"), &["index 3", "size 3"]);
    // an index of the wrong rank
    let err = t
        .gather(1, &Tensor::zeros([2], DType::I64, &DEV)?)
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "gather", .. }));
    assert_message(&err, Some("gather"), &["[2, 3]", "[2]"]);
    Ok(())
}

common::test_device!(bad_dim);

fn bad_dim(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = f32_tensor(&dev, &[2, 3])?;
    let err = t.transpose(0, 5).unwrap_err();
    match &err {
        Error::IndexOutOfRange {
            op, index, size, ..
        } => {
            assert_eq!(*op, "transpose");
            assert_eq!(*index, 5);
            assert_eq!(*size, 2);
        }
        other => panic!("expected IndexOutOfRange, got {other:?}"),
    }
    assert_message(&err, Some("transpose"), &["5", "2 dimension", "-2 to 1"]);
    let err = t.transpose(-3, 0).unwrap_err();
    assert!(matches!(
        err,
        Error::IndexOutOfRange {
            op: "transpose",
            index: -3,
            ..
        }
    ));
    for (name, err) in [
        ("sum", t.sum_dim(2, false).unwrap_err()),
        ("softmax", t.softmax(2).unwrap_err()),
        ("unsqueeze", t.unsqueeze(4).unwrap_err()),
        ("narrow", t.narrow(2, 0, 1).unwrap_err()),
        ("permute", t.permute([0, 2]).unwrap_err()),
    ] {
        match &err {
            Error::IndexOutOfRange { op, size, .. } => {
                assert_eq!(*op, name);
                assert!(*size == 2 || *size == 3, "{err}");
            }
            other => panic!("{name}: expected IndexOutOfRange, got {other:?}"),
        }
        assert_message(&err, Some(name), &[]);
    }
    // t() of a 3-D tensor
    let err = f32_tensor(&dev, &[2, 3, 4])?.t().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "t", .. }));
    assert_message(&err, Some("t"), &["3", "[2, 3, 4]", "transpose"]);
    // permute with the wrong number of dims
    let err = t.permute([0]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "permute", .. }));
    assert_message(&err, Some("permute"), &["[0]", "2 dimensions"]);
    // duplicated dim
    let err = t.permute([0, 0]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "permute", .. }));
    Ok(())
}

common::test_device!(unsqueeze_bad_dim_names_the_real_rank);

/// `unsqueeze(4)` on a 2-D tensor: the message must not claim the tensor has
/// 3 dimensions (the valid range -3..=2 is right, the tensor has 2 dims).
fn unsqueeze_bad_dim_names_the_real_rank(dev: &Device) -> Result<()> {
    let dev = *dev;
    let err = f32_tensor(&dev, &[2, 3])?.unsqueeze(4).unwrap_err();
    assert!(matches!(
        err,
        Error::IndexOutOfRange {
            op: "unsqueeze",
            index: 4,
            ..
        }
    ));
    let msg = err.to_string();
    assert!(msg.contains("-3 to 2"), "{msg}");
    assert!(!msg.contains("3 dimension"), "{msg}");
    assert!(msg.contains("2 dimension"), "{msg}");
    Ok(())
}

common::test_device!(from_vec_length_mismatch);

fn from_vec_length_mismatch(dev: &Device) -> Result<()> {
    let dev = *dev;
    let err = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [2, 2], &dev).unwrap_err();
    match &err {
        Error::ShapeMismatch { op, lhs, rhs, .. } => {
            assert_eq!(*op, "from_vec");
            assert_eq!(lhs, &vec![3]);
            assert_eq!(rhs, &vec![2, 2]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    assert_message(&err, Some("from_vec"), &["3 elements", "[2, 2]", "4"]);
    Ok(())
}

common::test_device!(view_with_wrong_numel);

fn view_with_wrong_numel(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = f32_tensor(&dev, &[2, 3])?;
    let err = t.view([4, 4]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "view", .. }));
    assert_message(&err, Some("view"), &["[4, 4]", "6 elements"]);
    let err = t.reshape([-1, -1]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "reshape", .. }));
    assert_message(&err, Some("reshape"), &["-1"]);
    let err = t.view([4, -1]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "view", .. }));
    Ok(())
}

common::test_device!(item_on_many_elements);

fn item_on_many_elements(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = f32_tensor(&dev, &[2, 3])?;
    let err = t.item::<f32>().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "item", .. }));
    assert_message(&err, Some("item"), &["6 elements", "[2, 3]"]);
    // one element in any shape is fine
    assert_eq!(f32_tensor(&dev, &[1, 1])?.item::<f32>()?, 0.0);
    Ok(())
}

common::test_device!(to_vec_with_wrong_element_type);

fn to_vec_with_wrong_element_type(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = f32_tensor(&dev, &[3])?;
    let err = t.to_vec::<i64>().unwrap_err();
    assert!(
        matches!(
            err,
            Error::DTypeMismatch {
                op: "to_vec",
                expected: DType::F32,
                found: DType::I64,
                ..
            }
        ),
        "{err:?}"
    );
    assert_message(&err, Some("to_vec"), &["float32", "int64", "to_dtype"]);
    let err = Tensor::zeros([2, 2], DType::F16, &dev)?
        .to_vec2::<f32>()
        .unwrap_err();
    assert!(matches!(
        err,
        Error::DTypeMismatch {
            expected: DType::F16,
            found: DType::F32,
            ..
        }
    ));
    assert_message(&err, None, &["float16", "float32"]);
    Ok(())
}

common::test_device!(item_with_wrong_element_type_names_item);

/// `item::<i64>()` on a float tensor should name `item`, the op the user
/// called, not the `to_vec` it uses inside.
fn item_with_wrong_element_type_names_item(dev: &Device) -> Result<()> {
    let dev = *dev;
    let err = Tensor::scalar(1.0f32, &dev)?.item::<i64>().unwrap_err();
    assert!(
        matches!(err, Error::DTypeMismatch { op: "item", .. }),
        "{err:?}"
    );
    let err = f32_tensor(&dev, &[2, 2])?.to_vec2::<i64>().unwrap_err();
    assert!(
        matches!(err, Error::DTypeMismatch { op: "to_vec2", .. }),
        "{err:?}"
    );
    Ok(())
}

common::test_device!(mean_of_int_tensor);

fn mean_of_int_tensor(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = Tensor::arange(0, 4, &dev)?;
    let err = t.mean().unwrap_err();
    assert!(
        matches!(
            err,
            Error::DTypeMismatch {
                op: "mean",
                found: DType::I64,
                ..
            }
        ),
        "{err:?}"
    );
    assert_message(&err, Some("mean"), &["int64", "floating"]);
    for (name, err) in [
        ("mean", t.mean_dim(0, false).unwrap_err()),
        ("var", t.var().unwrap_err()),
        ("std", t.std().unwrap_err()),
    ] {
        assert!(
            matches!(err, Error::DTypeMismatch { op, found: DType::I64, .. } if op == name),
            "{err:?}"
        );
    }
    // the fix the message names works
    assert_eq!(t.to_dtype(DType::F32)?.mean()?.item::<f32>()?, 1.5);
    Ok(())
}

common::test_device!(softmax_of_int_tensor);

fn softmax_of_int_tensor(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = Tensor::arange(0, 4, &dev)?;
    let err = t.softmax(0).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DTypeMismatch {
                op: "softmax",
                found: DType::I64,
                ..
            }
        ),
        "{err:?}"
    );
    assert_message(&err, Some("softmax"), &["int64"]);
    let err = t.log_softmax(0).unwrap_err();
    assert!(matches!(
        err,
        Error::DTypeMismatch {
            op: "log_softmax",
            ..
        }
    ));
    Ok(())
}

common::test_device!(where_with_non_bool_condition);

fn where_with_non_bool_condition(dev: &Device) -> Result<()> {
    let dev = *dev;
    let x = Tensor::arange(0.0, 3.0, &dev)?;
    let err = Tensor::where_cond(&x, &x, 0.0).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DTypeMismatch {
                op: "where",
                expected: DType::Bool,
                found: DType::F32,
                ..
            }
        ),
        "{err:?}"
    );
    assert_message(&err, Some("where"), &["bool", "float32"]);
    Ok(())
}

common::test_device!(index_with_non_i64_index);

fn index_with_non_i64_index(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = f32_tensor(&dev, &[3, 3])?;
    let idx = Tensor::from_vec(vec![0i32, 1], [2], &dev)?;
    let err = t.index_select(0, &idx).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DTypeMismatch {
                op: "index_select",
                expected: DType::I64,
                found: DType::I32,
                ..
            }
        ),
        "{err:?}"
    );
    assert_message(&err, Some("index_select"), &["int64", "int32"]);
    let err = t
        .gather(0, &Tensor::zeros([3, 3], DType::F32, &dev)?)
        .unwrap_err();
    assert!(matches!(
        err,
        Error::DTypeMismatch {
            op: "gather",
            expected: DType::I64,
            found: DType::F32,
            ..
        }
    ));
    // a 2-D index for index_select
    let err = t
        .index_select(0, &Tensor::zeros([1, 1], DType::I64, &dev)?)
        .unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidArgument {
            op: "index_select",
            ..
        }
    ));
    assert_message(&err, Some("index_select"), &["[1, 1]"]);
    Ok(())
}

common::test_device!(narrow_past_the_end);

fn narrow_past_the_end(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = f32_tensor(&dev, &[4, 2])?;
    let err = t.narrow(0, 2, 3).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "narrow", .. }));
    assert_message(&err, Some("narrow"), &["start 2", "length 3", "size 4"]);
    let err = t.narrow(0, -5, 1).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "narrow", .. }));
    // up to the end is fine
    assert_eq!(t.narrow(0, 2, 2)?.shape(), &[2, 2]);
    assert_eq!(t.narrow(0, 4, 0)?.shape(), &[0, 2]);
    Ok(())
}

common::test_device!(slice_step_zero);

fn slice_step_zero(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = f32_tensor(&dev, &[4])?;
    let err = t.slice_step(0, .., 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "slice", .. }));
    assert_message(&err, Some("slice"), &["step", "0"]);
    Ok(())
}

common::test_device!(bool_sub_and_neg);

fn bool_sub_and_neg(dev: &Device) -> Result<()> {
    let dev = *dev;
    let m = Tensor::from_vec(vec![true, false], [2], &dev)?;
    let err = m.sub(&m).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "sub", .. }));
    assert_message(&err, Some("sub"), &["bool"]);
    let err = m.sub(true).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "sub", .. }));
    let err = m.neg().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "neg", .. }));
    assert_message(&err, Some("neg"), &["bool"]);
    // bool add / mul are logical or / and
    assert_eq!(m.add(&m)?.to_vec::<bool>()?, vec![true, false]);
    Ok(())
}

common::test_device!(randint_low_not_below_high);

fn randint_low_not_below_high(dev: &Device) -> Result<()> {
    let dev = *dev;
    let err = Tensor::randint(5, 5, [3], &dev).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "randint", .. }));
    assert_message(&err, Some("randint"), &["5"]);
    let err = Tensor::randint(7, 2, [3], &dev).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "randint", .. }));
    assert_message(&err, Some("randint"), &["7", "2"]);
    Ok(())
}

common::test_device!(arange_zero_step);

fn arange_zero_step(dev: &Device) -> Result<()> {
    let dev = *dev;
    let err = Tensor::arange_step(0, 5, 0, &dev).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "arange", .. }));
    assert_message(&err, Some("arange"), &["step", "0"]);
    // a step away from the end
    let err = Tensor::arange_step(0.0, 5.0, -1.0, &dev).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "arange", .. }));
    assert_message(&err, Some("arange"), &["-1"]);
    Ok(())
}

common::test_device!(rand_with_int_dtype);

fn rand_with_int_dtype(dev: &Device) -> Result<()> {
    let dev = *dev;
    let err = Tensor::rand([2], DType::I64, &dev).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "rand", .. }));
    assert_message(&err, Some("rand"), &["int64"]);
    Ok(())
}

#[test]
fn unavailable_devices() -> Result<()> {
    for (dev, why) in [
        (common::missing_cuda(), "not available"),
        (common::missing_emu(), "does not exist"),
    ] {
        let name = dev.to_string();
        let results: Vec<Result<Tensor>> = vec![
            Tensor::zeros([2], DType::F32, &dev),
            Tensor::ones([0], DType::F32, &dev),
            Tensor::from_vec(vec![1i64, 2], [2], &dev),
            Tensor::arange(0, 3, &dev),
            Tensor::randn([2], DType::F32, &dev),
        ];
        for r in results {
            let err = match r {
                Ok(_) => panic!("creating a tensor on {name} must fail"),
                Err(e) => e,
            };
            assert!(matches!(err, Error::Device(_)), "{err:?}");
            assert_message(&err, None, &[&name, why]);
        }
    }
    // the suggested fallback works
    let Device::Cuda(gpus) = common::missing_cuda() else {
        unreachable!("missing_cuda is a cuda device")
    };
    assert_eq!(Device::cuda_if_available(gpus), Device::Cpu);
    Ok(())
}

#[test]
fn device_parse_errors() -> Result<()> {
    for bad in ["gpu", "cuda:x", "tpu:0", ""] {
        let err = Device::parse(bad).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidArgument {
                    op: "Device::parse",
                    ..
                }
            ),
            "{bad}: {err:?}"
        );
        assert_message(&err, Some("Device::parse"), &[&format!("`{bad}`"), "cpu"]);
    }
    assert_eq!(Device::parse("cuda:1")?, Device::Cuda(1));
    assert_eq!(Device::parse("emu")?, Device::Emulated(0));
    assert_eq!(Device::parse("cpu")?, Device::Cpu);
    Ok(())
}

// on the cpu only: the kernel raises it, so a device reports it at the next
// synchronisation (tests/faults.rs), as CUDA does
#[test]
fn other_argument_errors() -> Result<()> {
    let t = f32_tensor(&DEV, &[4, 2])?;
    let err = t.chunk(0, 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "chunk", .. }));
    assert_message(&err, Some("chunk"), &["chunks"]);
    let err = t.split_sizes(&[1, 2], 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "split", .. }));
    assert_message(&err, Some("split"), &["[1, 2]", "3", "size 4"]);
    let err = t.expand([3, 2]).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "expand", .. }));
    assert_message(&err, Some("expand"), &["[4, 2]", "[3, 2]"]);
    let err = t.flatten(1, 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "flatten", .. }));
    assert_message(&err, Some("flatten"), &["1", "0"]);
    let err = Tensor::zeros([0], DType::F32, &DEV)?.max().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "max", .. }));
    assert_message(&err, Some("max"), &["[0]", "empty"]);
    let err = Tensor::arange(1, 3, &DEV)?.pow(-1).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "pow", .. }));
    assert_message(&err, Some("pow"), &["negative"]);
    let mask = Tensor::zeros([3], DType::Bool, &DEV)?;
    let err = t.masked_fill(&mask, 0.0).unwrap_err();
    assert!(matches!(
        err,
        Error::ShapeMismatch {
            op: "masked_fill",
            ..
        }
    ));
    assert_message(&err, Some("masked_fill"), &["[4, 2]", "[3]"]);
    Ok(())
}

/// Run `f`, turning a panic into `None`.
fn no_panic<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Option<T> {
    std::panic::catch_unwind(f).ok()
}

/// Sizes whose arithmetic overflows must be errors, never panics (DESIGN:
/// "Library code never panics on user input"). Each case panics today with
/// "attempt to add/multiply with overflow" or "capacity overflow".
#[test]
fn huge_sizes_are_errors_not_panics() {
    let t = || Tensor::zeros([4], DType::F32, &DEV).expect("zeros");
    let big_error = |r: Result<Tensor>| {
        matches!(
            r,
            Err(Error::OutOfMemory(_)
                | Error::InvalidArgument { .. }
                | Error::ShapeMismatch { .. })
        )
    };
    let mut failures = Vec::new();
    let mut check = |name: &str, ok: Option<bool>| match ok {
        Some(true) => {}
        Some(false) => failures.push(format!("{name}: wrong result")),
        None => failures.push(format!("{name}: panicked")),
    };
    check(
        "zeros([usize::MAX]) f32",
        no_panic(|| big_error(Tensor::zeros([usize::MAX], DType::F32, &DEV))),
    );
    check(
        "zeros([1 << 62, 8])",
        no_panic(|| big_error(Tensor::zeros([1usize << 62, 8], DType::F32, &DEV))),
    );
    check(
        "expand([1 << 62, 8])",
        no_panic(|| big_error(t().expand([1i64 << 62, 8]))),
    );
    check(
        "narrow(0, 1, usize::MAX)",
        no_panic(|| {
            matches!(
                t().narrow(0, 1, usize::MAX),
                Err(Error::InvalidArgument { op: "narrow", .. })
            )
        }),
    );
    // Python's x[:sys.maxsize] is the whole tensor
    check(
        "slice(0, ..=isize::MAX)",
        no_panic(|| t().slice(0, ..=isize::MAX).map(|s| s.numel()).ok() == Some(4)),
    );
    check(
        "split_sizes(&[usize::MAX, 5], 0)",
        no_panic(|| {
            matches!(
                t().split_sizes(&[usize::MAX, 5], 0),
                Err(Error::InvalidArgument { op: "split", .. })
            )
        }),
    );
    check(
        "eye(1 << 40, 1 << 40)",
        no_panic(|| big_error(Tensor::eye(1 << 40, 1 << 40, DType::F32, &DEV))),
    );
    check(
        "arange_step(0.0, 1e30, 1e-30)",
        no_panic(|| big_error(Tensor::arange_step(0.0, 1e30, 1e-30, &DEV))),
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `rand` builds all values in a host `Vec<f64>` before allocating the
/// tensor, so a too-large request aborts the whole process ("memory
/// allocation of 8796093022208 bytes failed") instead of returning
/// `Error::OutOfMemory` as `Tensor::ones([1 << 40], ..)` does.
#[test]
fn huge_random_tensor_is_out_of_memory() {
    assert!(matches!(
        Tensor::ones([1usize << 40], DType::F32, &DEV),
        Err(Error::OutOfMemory(_))
    ));
    assert!(matches!(
        Tensor::rand([1usize << 40], DType::F32, &DEV),
        Err(Error::OutOfMemory(_))
    ));
}

common::test_device!(debug_prints_the_explanation);

/// Errors that escape `main` (or a test) are printed with `Debug`: it
/// shows the same explanation as `Display`, not the variant's fields.
fn debug_prints_the_explanation(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = f32_tensor(&dev, &[2, 3])?;
    let errs = vec![
        a.add(&f32_tensor(&dev, &[4])?).unwrap_err(),
        a.matmul(&a).unwrap_err(),
        a.view([7]).unwrap_err(),
        a.select(5, 0).unwrap_err(),
        a.to_vec::<i64>().unwrap_err(),
        a.item::<f32>().unwrap_err(),
        Device::parse("gpu").unwrap_err(),
        Tensor::zeros([2], DType::F32, &common::missing_cuda()).unwrap_err(),
        a.expand([2, 2, 3])?.add_(1.0).unwrap_err(),
        f32_tensor(&dev, &[2])?
            .requires_grad(true)?
            .add_(1.0)
            .unwrap_err(),
        a.backward().unwrap_err(),
        saved_tensor_modified()?,
    ];
    for err in errs {
        let (debug, display) = (format!("{err:?}"), err.to_string());
        assert_eq!(debug, display);
        assert!(!debug.contains(" { "), "{debug}");
    }
    Ok(())
}

fn saved_tensor_modified() -> Result<Error> {
    let x = f32_tensor(&DEV, &[3])?.requires_grad(true)?;
    let y = x.exp()?;
    y.add_(1.0)?;
    Ok(y.sum()?.backward().unwrap_err())
}

/// Run by [`an_error_escaping_main_prints_its_explanation`]: returns an
/// error, as `fn main() -> tensorguard::Result<()>` would.
#[test]
#[ignore = "run in a child process by an_error_escaping_main_prints_its_explanation"]
fn escaping_error_child() -> Result<()> {
    Err(saved_tensor_modified()?)
}

#[test]
fn an_error_escaping_main_prints_its_explanation() -> Result<()> {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            &common::child_test_name!("escaping_error_child"),
        ])
        .output()
        .expect("run the child test");
    let text = String::from_utf8_lossy(&out.stdout);
    let expected = saved_tensor_modified()?.to_string();
    // the saved line differs from ours only in its call site
    let head = &expected[..expected.find("at version").unwrap_or(expected.len())];
    assert!(!out.status.success(), "{text}");
    assert!(text.contains(&format!("Error: {head}")), "{text}");
    assert!(!text.contains("SavedTensorModified {"), "{text}");
    assert!(!text.contains("Location {"), "{text}");
    Ok(())
}
