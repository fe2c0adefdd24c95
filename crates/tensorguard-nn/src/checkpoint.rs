//! Checkpoint files in the [safetensors](https://huggingface.co/docs/safetensors)
//! format, which PyTorch (`safetensors.torch.load_file`) and Hugging Face
//! read: a [`StateDict`]'s tensors, and its `metadata` as the file's
//! `__metadata__` string map.
//!
//! Every dtype of tensorguard is stored as safetensors' own (`F32`, `F16`,
//! `BF16`, `F64`, `I64`, `I32`, `U8`, `BOOL`); tensors on a device are
//! copied to the host. [`save`] writes a temporary file next to the target,
//! flushes it to disk and renames it over the target, so a crash leaves
//! the old checkpoint or the new one, never half of one. Loading treats
//! the file as untrusted: a truncated or corrupted file, a dtype
//! tensorguard has no equivalent for, or (with [`load_into`]) a missing
//! tensor is an error naming the file and the tensor.
//!
//! ```
//! use tensorguard_nn::{checkpoint, Linear, Module};
//! use tensorguard_nn::tensorguard::Device;
//! # fn main() -> tensorguard_nn::tensorguard::Result<()> {
//! let dev = Device::Cpu;
//! let model = Linear::new(4, 2, true, &dev)?;
//! let mut sd = model.state_dict();
//! sd.metadata.insert("step".into(), "100".into());
//! let path = std::env::temp_dir().join("tensorguard-doc-ckpt.safetensors");
//! checkpoint::save(&path, &sd)?;
//!
//! let mut fresh = Linear::new(4, 2, true, &dev)?;
//! let loaded = checkpoint::load_into(&path, &mut fresh)?; // names, shapes, dtypes checked
//! assert_eq!(loaded.metadata["step"], "100");
//! assert_eq!(fresh.state_dict().require("test", "weight")?.to_vec2::<f32>()?,
//!            sd.require("test", "weight")?.to_vec2::<f32>()?);
//! # std::fs::remove_file(&path)?;
//! # Ok(()) }
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use half::{bf16, f16};
use safetensors::tensor::{Dtype, SafeTensors, View};
use tensorguard::{DType, Device, Error, Result, Tensor};

use crate::{Module, StateDict};

/// One tensor's bytes in the file's layout (little-endian, row-major).
struct HostBytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &HostBytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn le_bytes<T, const N: usize>(v: Vec<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * N);
    for x in v {
        out.extend_from_slice(&f(x));
    }
    out
}

fn to_host_bytes(t: &Tensor) -> Result<HostBytes> {
    let (dtype, data) = match t.dtype() {
        DType::F32 => (Dtype::F32, le_bytes(t.to_vec::<f32>()?, f32::to_le_bytes)),
        DType::F64 => (Dtype::F64, le_bytes(t.to_vec::<f64>()?, f64::to_le_bytes)),
        DType::F16 => (
            Dtype::F16,
            le_bytes(t.to_vec::<f16>()?, |x| x.to_bits().to_le_bytes()),
        ),
        DType::BF16 => (
            Dtype::BF16,
            le_bytes(t.to_vec::<bf16>()?, |x| x.to_bits().to_le_bytes()),
        ),
        DType::I64 => (Dtype::I64, le_bytes(t.to_vec::<i64>()?, i64::to_le_bytes)),
        DType::I32 => (Dtype::I32, le_bytes(t.to_vec::<i32>()?, i32::to_le_bytes)),
        DType::U8 => (Dtype::U8, t.to_vec::<u8>()?),
        DType::Bool => (Dtype::BOOL, le_bytes(t.to_vec::<bool>()?, |b| [b as u8])),
    };
    Ok(HostBytes {
        dtype,
        shape: t.shape().to_vec(),
        data,
    })
}

/// Write `sd` to `path` as a safetensors file, atomically (a temporary file
/// in the same directory, flushed, then renamed over `path`). Tensors on a
/// device are copied to the host (which waits for their pending writes).
pub fn save(path: impl AsRef<Path>, sd: &StateDict) -> Result<()> {
    let path = path.as_ref();
    let mut tensors = Vec::with_capacity(sd.len());
    for (name, t) in sd.iter() {
        let bytes = to_host_bytes(t).map_err(|e| Error::InvalidArgument {
            op: "checkpoint::save",
            message: format!("cannot save the tensor `{name}` to {}: {e}", path.display()),
        })?;
        tensors.push((name.to_string(), bytes));
    }
    let metadata: Option<HashMap<String, String>> = (!sd.metadata.is_empty()).then(|| {
        sd.metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    let buf =
        safetensors::tensor::serialize(tensors.iter().map(|(n, b)| (n.as_str(), b)), metadata)
            .map_err(|e| Error::InvalidArgument {
                op: "checkpoint::save",
                message: format!("cannot encode the checkpoint {}: {e}.", path.display()),
            })?;
    write_atomically(path, &buf)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let io = |what: &str, e: std::io::Error| {
        Error::InvalidArgument {
        op: "checkpoint::save",
        message: format!(
            "cannot write the checkpoint {}: {what} failed: {e}. Check that the directory exists, is writable and has space.",
            path.display()
        ),
    }
    };
    let file_name = path.file_name().ok_or_else(|| {
        io(
            "naming it",
            std::io::Error::other("the path has no file name"),
        )
    })?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let tmp_name = format!(
        ".{}.tmp-{}-{}",
        file_name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let tmp: PathBuf = dir.map_or_else(|| PathBuf::from(&tmp_name), |d| d.join(&tmp_name));
    let result = (|| {
        let mut f =
            std::fs::File::create_new(&tmp).map_err(|e| io("creating a temporary file", e))?;
        f.write_all(bytes).map_err(|e| io("writing", e))?;
        f.sync_all().map_err(|e| io("flushing to disk", e))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| io("renaming the temporary file over it", e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return result;
    }
    // make the rename itself durable (best effort: not every platform lets
    // a directory be opened)
    if let Ok(d) = std::fs::File::open(dir.unwrap_or(Path::new("."))) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn load_error(path: &Path, what: String) -> Error {
    Error::InvalidArgument {
        op: "checkpoint::load",
        message: format!("the checkpoint {} cannot be loaded: {what}", path.display()),
    }
}

fn from_le<T: tensorguard::Element, const N: usize>(
    data: &[u8],
    shape: &[usize],
    device: &Device,
    f: impl Fn([u8; N]) -> T,
) -> Result<Tensor> {
    let v: Vec<T> = data
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect();
    Tensor::from_vec(v, shape, device)
}

/// Read the safetensors file at `path` into a [`StateDict`] whose tensors
/// are on `device`, in the file's order, with its `__metadata__` as
/// `metadata`. A file that is not valid safetensors (truncated, corrupted,
/// offsets that do not fit) or a tensor of a dtype tensorguard does not
/// have (`I8`, `U16`, `F8_*`, ...) is an error naming the file (and the
/// tensor).
pub fn load(path: impl AsRef<Path>, device: &Device) -> Result<StateDict> {
    let path = path.as_ref();
    let buf = std::fs::read(path).map_err(|e| {
        load_error(
            path,
            format!("reading it failed: {e}. Check the path (was the checkpoint saved?)."),
        )
    })?;
    let corrupt = |e: safetensors::SafeTensorError| {
        load_error(
            path,
            format!(
                "it is not a valid safetensors file ({e}; {} bytes). It is probably truncated or corrupted; use another checkpoint.",
                buf.len()
            ),
        )
    };
    let (_, meta) = SafeTensors::read_metadata(&buf).map_err(corrupt)?;
    let st = SafeTensors::deserialize(&buf).map_err(corrupt)?;
    let mut infos: Vec<(String, usize)> = meta
        .tensors()
        .into_iter()
        .map(|(n, i)| (n, i.data_offsets.0))
        .collect();
    infos.sort_by_key(|(n, off)| (*off, n.clone()));
    let mut sd = StateDict::new();
    for (name, _) in infos {
        let view = st.tensor(&name).map_err(corrupt)?;
        let (data, shape) = (view.data(), view.shape());
        let t = match view.dtype() {
            Dtype::F32 => from_le(data, shape, device, f32::from_le_bytes),
            Dtype::F64 => from_le(data, shape, device, f64::from_le_bytes),
            Dtype::F16 => from_le(data, shape, device, |b| f16::from_bits(u16::from_le_bytes(b))),
            Dtype::BF16 => from_le(data, shape, device, |b| bf16::from_bits(u16::from_le_bytes(b))),
            Dtype::I64 => from_le(data, shape, device, i64::from_le_bytes),
            Dtype::I32 => from_le(data, shape, device, i32::from_le_bytes),
            Dtype::U8 => Tensor::from_slice(data, shape, device),
            Dtype::BOOL => {
                if let Some(bad) = data.iter().find(|&&b| b > 1) {
                    return Err(load_error(
                        path,
                        format!("the bool tensor `{name}` holds the byte {bad}, not 0 or 1 (the file is corrupted)."),
                    ));
                }
                from_le(data, shape, device, |[b]: [u8; 1]| b != 0)
            }
            other => {
                return Err(load_error(
                    path,
                    format!(
                        "the tensor `{name}` has dtype {other:?}, which tensorguard does not have (it has float32, float64, float16, bfloat16, int64, int32, uint8 and bool). Convert it before saving (e.g. `t.to(torch.int64)` in PyTorch)."
                    ),
                ))
            }
        }
        .map_err(|e| load_error(path, format!("the tensor `{name}` cannot be created: {e}")))?;
        sd.insert(name, t);
    }
    if let Some(m) = meta.metadata() {
        sd.metadata
            .extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    Ok(sd)
}

/// Load the checkpoint at `path` into `module` (on the device of its first
/// parameter), strictly: every parameter and buffer of the module must be
/// in the file with the same shape and dtype, and the file must hold no
/// other tensor; each mismatch is an error naming the file and the
/// tensor. Returns what was loaded (its metadata holds the step, ...).
pub fn load_into<M: Module + ?Sized>(path: impl AsRef<Path>, module: &mut M) -> Result<StateDict> {
    let path = path.as_ref();
    let mine = module.state_dict();
    let device = mine.iter().next().map_or(Device::Cpu, |(_, t)| t.device());
    let sd = load(path, &device)?;
    let mismatch = |what: String| Error::InvalidArgument {
        op: "checkpoint::load_into",
        message: format!(
            "the checkpoint {} does not fit {}: {what}",
            path.display(),
            module.describe()
        ),
    };
    for (name, t) in mine.iter() {
        let Some(f) = sd.get(name) else {
            return Err(mismatch(format!(
                "it has no tensor `{name}` (it has {} tensors). Was it saved from the same model?",
                sd.len()
            )));
        };
        if f.dtype() != t.dtype() {
            return Err(mismatch(format!(
                "the tensor `{name}` is {} in the file but {} in the model. Load it with `checkpoint::load`, convert with `to_dtype`, then `load_state_dict`.",
                f.dtype(),
                t.dtype()
            )));
        }
        if f.shape() != t.shape() {
            return Err(mismatch(format!(
                "the tensor `{name}` has shape {:?} in the file but {:?} in the model. Was it saved from a model of the same size?",
                f.shape(),
                t.shape()
            )));
        }
    }
    if let Some(extra) = sd.names().find(|n| mine.get(n).is_none()) {
        return Err(mismatch(format!(
            "it has a tensor `{extra}` that the model does not have. Was it saved from another model?"
        )));
    }
    drop(mine);
    module.load_state_dict(&sd)?;
    Ok(sd)
}
