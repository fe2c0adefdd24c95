//! Checkpoint files (safetensors): round trips of every dtype from the cpu
//! and from `emu:N`, metadata, a file written by Python's safetensors,
//! atomic writes, and hostile files (corrupted, truncated, unknown dtype,
//! missing tensor).

use std::path::{Path, PathBuf};
use std::sync::Once;

use half::{bf16, f16};
use tensorguard_nn::checkpoint;
use tensorguard_nn::tensorguard::device::{self, EmulatedConfig};
use tensorguard_nn::tensorguard::{memory, DType, Device, Error, Result, Tensor};
use tensorguard_nn::{Linear, Module, StateDict};

/// `emu:0` for this binary's device round trip (one test uses it).
fn emu() -> Device {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        device::configure_emulated(EmulatedConfig::uniform(2, 1 << 30))
            .expect("the emulated devices are configured before any test uses them");
    });
    Device::Emulated(0)
}

/// A fresh directory for one test.
fn tmp_dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorguard-nn-ckpt-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create a temporary directory");
    d
}

fn message(e: &Error) -> String {
    e.to_string()
}

/// A state dict with every dtype, on `dev`.
fn all_dtypes(dev: &Device) -> Result<StateDict> {
    let mut sd = StateDict::new();
    sd.insert(
        "f32",
        Tensor::from_vec(vec![1.5f32, -2.0, 3.25, 0.0, 1e-8, -7.0], [2, 3], dev)?,
    );
    sd.insert(
        "f64",
        Tensor::from_vec(vec![std::f64::consts::PI, -1e300], [2], dev)?,
    );
    sd.insert(
        "f16",
        Tensor::from_vec(vec![f16::from_f32(0.5), f16::from_f32(-65504.0)], [2], dev)?,
    );
    sd.insert(
        "bf16",
        Tensor::from_vec(
            vec![bf16::from_f32(1.0e30), bf16::from_f32(-0.125)],
            [1, 2],
            dev,
        )?,
    );
    sd.insert(
        "i64",
        Tensor::from_vec(vec![i64::MIN, 0, i64::MAX], [3], dev)?,
    );
    sd.insert("i32", Tensor::from_vec(vec![i32::MIN, 42], [2, 1], dev)?);
    sd.insert("u8", Tensor::from_vec(vec![0u8, 255, 7], [3], dev)?);
    sd.insert(
        "bool",
        Tensor::from_vec(vec![true, false, true, true], [2, 2], dev)?,
    );
    sd.insert("scalar", Tensor::scalar(2.5f32, dev)?);
    // a non-contiguous view is saved as its values
    let t = Tensor::arange(0, 6, dev)?.view([2, 3])?.transpose(0, 1)?;
    sd.insert("transposed", t);
    sd.metadata.insert("step".into(), "1234".into());
    sd.metadata
        .insert("note".into(), "épreuve, with \"quotes\"".into());
    Ok(sd)
}

fn assert_same(a: &StateDict, b: &StateDict) -> Result<()> {
    assert_eq!(a.len(), b.len());
    for (name, t) in a.iter() {
        let u = b
            .get(name)
            .unwrap_or_else(|| panic!("`{name}` is missing after the round trip"));
        assert_eq!((t.shape(), t.dtype()), (u.shape(), u.dtype()), "{name}");
        // compare exactly, through f64 (every value here is exact in f64)
        let (x, y) = (
            t.to_dtype(DType::F64)?.to_vec::<f64>()?,
            u.to_dtype(DType::F64)?.to_vec::<f64>()?,
        );
        assert_eq!(x, y, "{name}");
    }
    assert_eq!(a.metadata, b.metadata);
    Ok(())
}

#[test]
fn round_trip_every_dtype_on_the_cpu() -> Result<()> {
    let dir = tmp_dir("cpu");
    let sd = all_dtypes(&Device::Cpu)?;
    let path = dir.join("all.safetensors");
    checkpoint::save(&path, &sd)?;
    let back = checkpoint::load(&path, &Device::Cpu)?;
    assert_same(&sd, &back)?;
    assert_eq!(
        back.get("transposed").unwrap().to_vec2::<i64>()?,
        vec![vec![0, 3], vec![1, 4], vec![2, 5]]
    );
    // the temporary file of the atomic write is gone: only the checkpoint is left
    let names: Vec<_> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()?;
    assert_eq!(names, vec![std::ffi::OsString::from("all.safetensors")]);
    // kept for a manual check with Python's loader (see tests/fixtures/make_fixture.py)
    std::fs::copy(
        &path,
        std::env::temp_dir().join("tensorguard-nn-all-dtypes.safetensors"),
    )?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn round_trip_from_and_to_an_emulated_device() -> Result<()> {
    let dev = emu();
    let dir = tmp_dir("emu");
    {
        let sd = all_dtypes(&dev)?;
        let path = dir.join("emu.safetensors");
        checkpoint::save(&path, &sd)?;
        let back = checkpoint::load(&path, &dev)?;
        assert!(back.iter().all(|(_, t)| t.device() == dev));
        assert_same(&sd, &back)?;
        let on_cpu = checkpoint::load(&path, &Device::Cpu)?;
        assert_same(&sd, &on_cpu)?;
        // a model on the device loads onto its own device
        let model = Linear::new(3, 2, true, &Device::Cpu)?;
        let model_path = dir.join("model.safetensors");
        checkpoint::save(&model_path, &model.state_dict())?;
        let mut on_dev = Linear::new(3, 2, true, &dev)?;
        let loaded = checkpoint::load_into(&model_path, &mut on_dev)?;
        assert!(loaded.iter().all(|(_, t)| t.device() == dev));
        let w = on_dev.state_dict();
        assert_eq!(w.get("weight").unwrap().device(), dev);
        assert_eq!(
            w.get("weight").unwrap().to_vec2::<f32>()?,
            model.state_dict().get("weight").unwrap().to_vec2::<f32>()?
        );
    }
    device::synchronize(&dev)?;
    assert_eq!(memory::allocated(&dev), 0, "{}", memory::summary(&dev));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn reads_a_file_written_by_python_safetensors() -> Result<()> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python_written.safetensors");
    let sd = checkpoint::load(&path, &Device::Cpu)?;
    assert_eq!(sd.len(), 8);
    assert_eq!(sd.metadata.get("step").map(String::as_str), Some("12"));
    assert_eq!(sd.metadata.get("format").map(String::as_str), Some("pt"));
    let get = |n: &str| sd.get(n).unwrap_or_else(|| panic!("no `{n}`"));
    assert_eq!(
        get("layer.weight").to_vec2::<f32>()?,
        vec![vec![0.0, 0.25, 0.5], vec![0.75, 1.0, 1.25]]
    );
    assert_eq!(get("layer.bias").to_vec::<f64>()?, vec![-1.5, 2.25]);
    assert_eq!(get("half").dtype(), DType::F16);
    assert_eq!(
        get("half").to_dtype(DType::F32)?.to_vec::<f32>()?,
        vec![0.5, -2.0, 65504.0]
    );
    assert_eq!(
        get("steps").to_vec2::<i64>()?,
        vec![vec![1, -2], vec![3, 1 << 40]]
    );
    assert_eq!(get("counts").to_vec::<i32>()?, vec![7, -8]);
    assert_eq!(get("pixels").to_vec::<u8>()?, vec![0, 128, 255]);
    assert_eq!(get("mask").to_vec::<bool>()?, vec![true, false, true]);
    assert_eq!(
        (get("scalar").ndim(), get("scalar").item::<f32>()?),
        (0, 3.5)
    );
    Ok(())
}

#[test]
fn a_model_round_trips_and_overwrites_atomically() -> Result<()> {
    let dir = tmp_dir("model");
    let path = dir.join("model.safetensors");
    let model = Linear::new(5, 3, true, &Device::Cpu)?;
    checkpoint::save(&path, &model.state_dict())?;
    // overwriting an existing checkpoint replaces it
    let mut sd = model.state_dict();
    sd.metadata.insert("epoch".into(), "2".into());
    checkpoint::save(&path, &sd)?;
    let mut fresh = Linear::new(5, 3, true, &Device::Cpu)?;
    let loaded = checkpoint::load_into(&path, &mut fresh)?;
    assert_eq!(loaded.metadata["epoch"], "2");
    for (n, t) in model.state_dict().iter() {
        assert_eq!(
            fresh.state_dict().get(n).unwrap().to_vec::<f32>()?,
            t.to_vec::<f32>()?,
            "{n}"
        );
    }
    // a file of another model: the missing tensor is named with the file
    let mut no_bias = Linear::new(5, 3, false, &Device::Cpu)?;
    checkpoint::save(dir.join("no_bias.safetensors"), &no_bias.state_dict())?;
    let e = checkpoint::load_into(dir.join("no_bias.safetensors"), &mut fresh).unwrap_err();
    assert!(
        message(&e).contains("no_bias.safetensors") && message(&e).contains("no tensor `bias`"),
        "{e}"
    );
    let e = checkpoint::load_into(&path, &mut no_bias).unwrap_err();
    assert!(
        message(&e).contains("model.safetensors") && message(&e).contains("`bias`"),
        "{e}"
    );
    // a wrong dtype is named with both dtypes
    let mut half = StateDict::new();
    for (n, t) in model.state_dict().iter() {
        half.insert(n, t.to_dtype(DType::F16)?);
    }
    checkpoint::save(dir.join("half.safetensors"), &half)?;
    let e = checkpoint::load_into(dir.join("half.safetensors"), &mut fresh).unwrap_err();
    assert!(
        message(&e).contains("`weight` is float16 in the file but float32"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn corrupted_and_truncated_files_are_errors_naming_the_file() -> Result<()> {
    let dir = tmp_dir("bad");
    let path = dir.join("good.safetensors");
    checkpoint::save(&path, &all_dtypes(&Device::Cpu)?)?;
    let bytes = std::fs::read(&path)?;

    let truncated = dir.join("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() - 3])?;
    let e = checkpoint::load(&truncated, &Device::Cpu).unwrap_err();
    assert!(
        message(&e).contains("truncated.safetensors")
            && message(&e).contains("not a valid safetensors file"),
        "{e}"
    );

    let tiny = dir.join("tiny.safetensors");
    std::fs::write(&tiny, &bytes[..5])?;
    assert!(
        message(&checkpoint::load(&tiny, &Device::Cpu).unwrap_err()).contains("tiny.safetensors")
    );

    let mut garbled = bytes.clone();
    garbled[10] = b'#'; // inside the JSON header
    let corrupt = dir.join("corrupt.safetensors");
    std::fs::write(&corrupt, &garbled)?;
    let e = checkpoint::load(&corrupt, &Device::Cpu).unwrap_err();
    assert!(message(&e).contains("corrupt.safetensors"), "{e}");

    // a header length far past the end of the file
    let mut huge = bytes.clone();
    huge[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&corrupt, &huge)?;
    assert!(checkpoint::load(&corrupt, &Device::Cpu).is_err());

    // a bool tensor holding 2
    let mut sd = StateDict::new();
    sd.insert("flag", Tensor::from_vec(vec![true], [1], &Device::Cpu)?);
    checkpoint::save(&corrupt, &sd)?;
    let mut b = std::fs::read(&corrupt)?;
    *b.last_mut().unwrap() = 2;
    std::fs::write(&corrupt, &b)?;
    let e = checkpoint::load(&corrupt, &Device::Cpu).unwrap_err();
    assert!(
        message(&e).contains("`flag`") && message(&e).contains("corrupt.safetensors"),
        "{e}"
    );

    let e = checkpoint::load(dir.join("absent.safetensors"), &Device::Cpu).unwrap_err();
    assert!(message(&e).contains("absent.safetensors"), "{e}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A safetensors file with one tensor of `dtype`, written by hand.
fn raw_file(name: &str, dtype: &str, data: &[u8]) -> Vec<u8> {
    let header = format!(
        r#"{{"{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[0,{}]}}}}"#,
        data.len() / 2,
        data.len()
    );
    let mut h = header.into_bytes();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

#[test]
fn a_dtype_tensorguard_lacks_is_an_error_naming_the_tensor() -> Result<()> {
    let dir = tmp_dir("dtype");
    let path = dir.join("int16.safetensors");
    std::fs::write(&path, raw_file("counts", "I16", &[1, 0, 2, 0]))?;
    let e = checkpoint::load(&path, &Device::Cpu).unwrap_err();
    let m = message(&e);
    assert!(
        m.contains("int16.safetensors") && m.contains("`counts`") && m.contains("I16"),
        "{m}"
    );
    // the same layout with a dtype it has loads
    std::fs::write(&path, raw_file("counts", "F16", &[0, 0x3c, 0, 0x40]))?;
    let sd = checkpoint::load(&path, &Device::Cpu)?;
    assert_eq!(
        sd.get("counts")
            .unwrap()
            .to_dtype(DType::F32)?
            .to_vec::<f32>()?,
        vec![1.0, 2.0]
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn saving_into_a_missing_directory_is_an_error_and_leaves_nothing() -> Result<()> {
    let dir = tmp_dir("missing");
    let path = dir.join("no/such/dir/ckpt.safetensors");
    let e = checkpoint::save(&path, &all_dtypes(&Device::Cpu)?).unwrap_err();
    assert!(message(&e).contains("ckpt.safetensors"), "{e}");
    assert_eq!(std::fs::read_dir(&dir)?.count(), 0);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
