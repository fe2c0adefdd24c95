//! NCCL under the CUDA backend: the library, found by path and opened at
//! run time, a communicator as an RAII handle, and a collective as kernel
//! data ([`Call`]) that the backend enqueues on a stream like any kernel.
//!
//! Note [Finding NCCL]: cudarc's loader asks for `libnccl.so` and then
//! `libnccl.so.{13,12,11,10,9,1}`, but NVIDIA's NCCL (the pip wheel
//! `nvidia-nccl-cu13` that PyTorch installs, Debian's `libnccl2`) ships
//! only `libnccl.so.2`; `libnccl.so` is the development symlink, often
//! absent. So we open the library ourselves and only borrow cudarc's
//! bindgen definitions (`cudarc::nccl::sys`) for the id and the enums.
//! The search, in order: `TENSORGUARD_NCCL_LIB` (the file, or its
//! directory), `libnccl.so.2` and `libnccl.so` by name (LD_LIBRARY_PATH and
//! the loader's cache), then NCCL's pip wheel under the Python prefixes
//! (`$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`, `/usr/local`, `/usr`,
//! `/opt/conda`) and the CUDA toolkit. The error lists every place tried.
//!
//! Every call here returns NCCL's `ncclResult_t` as a plain `c_int` (an
//! unknown code must not become an invalid Rust enum).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};
use parking_lot::Mutex;

use crate::device_id::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};

type GetUniqueId = unsafe extern "C" fn(*mut ncclUniqueId) -> c_int;
type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type CommInitRank = unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> c_int;
type CommEnd = unsafe extern "C" fn(ncclComm_t) -> c_int;
type CommGetAsyncError = unsafe extern "C" fn(ncclComm_t, *mut c_int) -> c_int;
type Reducing = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    ncclComm_t,
    *mut c_void,
) -> c_int;
type AllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    ncclComm_t,
    *mut c_void,
) -> c_int;

/// NCCL's functions, resolved once.
struct Lib {
    path: String,
    version: c_int,
    get_unique_id: GetUniqueId,
    error_string: GetErrorString,
    init_rank: CommInitRank,
    destroy: CommEnd,
    abort: CommEnd,
    async_error: CommGetAsyncError,
    all_reduce: Reducing,
    broadcast: Reducing,
    all_gather: AllGather,
    reduce_scatter: Reducing,
    /// Kept open for the life of the process (the pointers above are its).
    _lib: libloading::Library,
}

/// `ncclSuccess`, `ncclInProgress` (a non-blocking communicator's pending
/// state; ours are blocking, so it only comes from `ncclCommGetAsyncError`).
const NCCL_SUCCESS: c_int = 0;
const NCCL_IN_PROGRESS: c_int = 7;

/// Where NCCL was looked for, in order (Note [Finding NCCL]).
fn candidates() -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("TENSORGUARD_NCCL_LIB").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_dir() {
            out.push((p.join("libnccl.so.2"), "TENSORGUARD_NCCL_LIB"));
        } else {
            out.push((p, "TENSORGUARD_NCCL_LIB"));
        }
    }
    out.push((PathBuf::from("libnccl.so.2"), "the library path"));
    out.push((PathBuf::from("libnccl.so"), "the library path"));
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(|v| {
            std::env::var_os(v)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        })
        .collect();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        prefixes.push(PathBuf::from(home).join(".local"));
    }
    prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    for prefix in prefixes {
        for site in python_site_dirs(&prefix) {
            out.push((
                site.join("nvidia/nccl/lib/libnccl.so.2"),
                "NCCL's pip wheel",
            ));
        }
        out.push((prefix.join("lib/libnccl.so.2"), "a prefix's lib"));
    }
    out.push((
        PathBuf::from("/usr/local/cuda/lib64/libnccl.so.2"),
        "the CUDA toolkit",
    ));
    out
}

/// `PREFIX/lib/python3.*/{site,dist}-packages` and Debian's
/// `PREFIX/lib/python3/dist-packages`, those that exist.
fn python_site_dirs(prefix: &Path) -> Vec<PathBuf> {
    let lib = prefix.join("lib");
    let mut dirs = Vec::new();
    let Ok(entries) = std::fs::read_dir(&lib) else {
        return dirs;
    };
    let mut pythons: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"))
        })
        .collect();
    pythons.sort();
    for py in pythons {
        for kind in ["site-packages", "dist-packages"] {
            let d = py.join(kind);
            if d.is_dir() {
                dirs.push(d);
            }
        }
    }
    dirs
}

/// The error when NCCL cannot be opened: every place tried, and what to do.
fn not_found(tried: &[(PathBuf, &'static str, String)]) -> String {
    let list: Vec<String> = tried
        .iter()
        .map(|(p, why, e)| format!("{} ({why}: {e})", p.display()))
        .collect();
    format!(
        "NCCL could not be loaded. Tried {}. NVIDIA's NCCL ships only libnccl.so.2 (cudarc's loader looks for libnccl.so, which is the development symlink): install it (`pip install nvidia-nccl-cu13`, which PyTorch's CUDA wheels bring, or Debian's libnccl2) and, where it is not found, set TENSORGUARD_NCCL_LIB to the file, e.g. TENSORGUARD_NCCL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')/lib/libnccl.so.2",
        list.join("; ")
    )
}

fn open() -> std::result::Result<Lib, String> {
    let mut tried = Vec::new();
    for (path, why) in candidates() {
        let by_name = path.components().count() == 1;
        if !by_name && !path.exists() {
            continue;
        }
        // SAFETY: opening NCCL runs its library constructors, which only
        // initialise NCCL's own state.
        match unsafe { libloading::Library::new(&path) } {
            Ok(lib) => return resolve(lib, path.display().to_string()),
            Err(e) => tried.push((path, why, e.to_string())),
        }
    }
    if tried.iter().all(|(p, _, _)| p.components().count() == 1) {
        tried.push((
            PathBuf::from("the Python prefixes and /usr/local/cuda"),
            "searched",
            "no libnccl.so.2 there".into(),
        ));
    }
    Err(not_found(&tried))
}

fn resolve(lib: libloading::Library, path: String) -> std::result::Result<Lib, String> {
    fn sym<T: Copy>(
        lib: &libloading::Library,
        path: &str,
        name: &str,
    ) -> std::result::Result<T, String> {
        // SAFETY: each name is resolved with the C signature NCCL's header
        // declares for it (the type aliases above, from nccl.h 2.x).
        unsafe { lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("{path} is not a usable NCCL: it has no {name} ({e})"))
    }
    let get_version: GetVersion = sym(&lib, &path, "ncclGetVersion")?;
    let mut version = 0;
    // SAFETY: writes one int through a valid pointer.
    let rc = unsafe { get_version(&mut version) };
    if rc != NCCL_SUCCESS {
        return Err(format!("{path}: ncclGetVersion failed with code {rc}"));
    }
    // ncclAvg and bf16 need NCCL 2.10; every wheel of CUDA 13 is newer
    if version < 21000 {
        return Err(format!(
            "{path} is NCCL {}, older than 2.10 (which tensorguard needs for ReduceOp::Avg and bf16). Install a newer NCCL (`pip install nvidia-nccl-cu13`).",
            version_text(version)
        ));
    }
    Ok(Lib {
        version,
        get_unique_id: sym(&lib, &path, "ncclGetUniqueId")?,
        error_string: sym(&lib, &path, "ncclGetErrorString")?,
        init_rank: sym(&lib, &path, "ncclCommInitRank")?,
        destroy: sym(&lib, &path, "ncclCommDestroy")?,
        abort: sym(&lib, &path, "ncclCommAbort")?,
        async_error: sym(&lib, &path, "ncclCommGetAsyncError")?,
        all_reduce: sym(&lib, &path, "ncclAllReduce")?,
        broadcast: sym(&lib, &path, "ncclBroadcast")?,
        all_gather: sym(&lib, &path, "ncclAllGather")?,
        reduce_scatter: sym(&lib, &path, "ncclReduceScatter")?,
        path,
        _lib: lib,
    })
}

/// NCCL's integer version (22703) as text (2.27.3).
fn version_text(v: c_int) -> String {
    format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
}

fn lib() -> Result<&'static Lib> {
    static LIB: OnceLock<std::result::Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(open)
        .as_ref()
        .map_err(|e| Error::Device(e.clone()))
}

/// NCCL's library path and version (`2.27.3`), or why it cannot be loaded.
pub(crate) fn library() -> Result<(String, String)> {
    let l = lib()?;
    Ok((l.path.clone(), version_text(l.version)))
}

/// An NCCL result code as an error of `call` (`op`: the public call).
fn check(l: &Lib, op: &'static str, call: &str, rc: c_int) -> Result<()> {
    if rc == NCCL_SUCCESS {
        return Ok(());
    }
    // SAFETY: ncclGetErrorString returns a static C string for any code.
    let text = unsafe { CStr::from_ptr((l.error_string)(rc)) }
        .to_string_lossy()
        .into_owned();
    Err(Error::Device(format!(
        "{op}: the NCCL call {call} failed with code {rc} ({text}). Run with NCCL_DEBUG=INFO for NCCL's own account (a rank that died, a network that cannot be reached, two ranks on one GPU)."
    )))
}

/// A fresh NCCL unique id (rank 0 makes it and hands it to the others).
pub(crate) fn unique_id() -> Result<[u8; 128]> {
    let l = lib()?;
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: writes the id through a valid pointer.
    check(l, "NcclId::new", "ncclGetUniqueId", unsafe {
        (l.get_unique_id)(&mut id)
    })?;
    Ok(id.internal.map(|c| c as u8))
}

/// One NCCL communicator (one rank of one group on one GPU). Calls on it
/// are serialised (NCCL forbids using a communicator from two threads at
/// once); it is destroyed when dropped, or aborted after a fault.
pub(crate) struct Comm {
    raw: Mutex<ncclComm_t>,
    device: Device,
    rank: usize,
    world: usize,
    aborted: AtomicBool,
}

// SAFETY: the handle is only passed to NCCL calls, made under the mutex.
unsafe impl Send for Comm {}
// SAFETY: as above.
unsafe impl Sync for Comm {}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NcclComm(rank {} of {} on {})",
            self.rank, self.world, self.device
        )
    }
}

impl Comm {
    /// Join the group of `id` as `rank` of `world` on GPU `index` (blocks
    /// until every rank has joined: NCCL's `ncclCommInitRank`).
    pub(crate) fn new(index: usize, id: &[u8; 128], rank: usize, world: usize) -> Result<Comm> {
        const OP: &str = "NcclComm::new";
        let l = lib()?;
        // NCCL runs on the current device: the runtime takes it from the
        // current context, the primary context the backend uses
        let ctx = super::context::gpu_ctx(index)?;
        ctx.bind()?;
        let (nranks, me) = match (c_int::try_from(world), c_int::try_from(rank)) {
            (Ok(n), Ok(r)) if rank < world => (n, r),
            _ => {
                return Err(Error::invalid(
                    OP,
                    format!("rank {rank} of a world of {world} is not a rank of it. Pass 0 <= rank < world_size."),
                ))
            }
        };
        let mut uid = ncclUniqueId { internal: [0; 128] };
        for (d, s) in uid.internal.iter_mut().zip(id) {
            *d = *s as c_char;
        }
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: writes the communicator through a valid pointer; the id
        // is passed by value as NCCL declares it.
        let rc = unsafe { (l.init_rank)(&mut raw, nranks, uid, me) };
        check(l, OP, "ncclCommInitRank", rc)?;
        Ok(Comm {
            raw: Mutex::new(raw),
            device: Device::Cuda(index),
            rank,
            world,
            aborted: AtomicBool::new(false),
        })
    }

    pub(crate) fn device(&self) -> Device {
        self.device
    }
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }
    pub(crate) fn world_size(&self) -> usize {
        self.world
    }

    /// The fault NCCL found on its own threads since (a peer that left,
    /// a network error), as an error of `op`; `Ok` while none.
    pub(crate) fn async_error(&self, op: &'static str) -> Result<()> {
        let l = lib()?;
        if self.aborted.load(Ordering::Acquire) {
            return Err(aborted(op));
        }
        let raw = self.raw.lock();
        let mut state = NCCL_SUCCESS;
        // SAFETY: a live communicator (not aborted: checked above, under
        // the same lock `abort` takes) and a valid out pointer.
        let rc = unsafe { (l.async_error)(*raw, &mut state) };
        check(l, op, "ncclCommGetAsyncError", rc)?;
        if state == NCCL_IN_PROGRESS {
            return Ok(());
        }
        check(l, op, "a collective (ncclCommGetAsyncError)", state)
    }

    /// Abort the communicator: collectives stuck waiting for a peer return,
    /// and every later call on it is an error (PyTorch's watchdog does the
    /// same after its timeout).
    pub(crate) fn abort(&self) {
        let Ok(l) = lib() else { return };
        let raw = self.raw.lock();
        if !self.aborted.swap(true, Ordering::AcqRel) {
            // SAFETY: a live communicator, aborted once (the flag).
            let _ = unsafe { (l.abort)(*raw) };
        }
    }

    /// Issue `call` on `stream` (inside the backend's submit: in stream
    /// order), from `send` into `recv` (device addresses of contiguous
    /// elements).
    pub(crate) fn enqueue(
        &self,
        call: &Call,
        send: u64,
        recv: u64,
        stream: *mut c_void,
    ) -> Result<()> {
        let l = lib()?;
        let op = call.op;
        let raw = self.raw.lock();
        if self.aborted.load(Ordering::Acquire) {
            return Err(aborted(op));
        }
        let (s, r) = (send as *const c_void, recv as *mut c_void);
        let (n, dt) = (call.count, call.dtype as c_int);
        // SAFETY: `send` and `recv` are device addresses of `count`
        // elements (`count * world` for all_gather's output and
        // reduce_scatter's input: checked by the caller, `nccl.rs` at the
        // crate root) held by the stream's in-flight item until the work
        // completes; the communicator is live (not aborted, under its lock).
        let (name, rc) = unsafe {
            match call.what {
                What::AllReduce(o) => (
                    "ncclAllReduce",
                    (l.all_reduce)(s, r, n, dt, o as c_int, *raw, stream),
                ),
                What::Broadcast { root } => (
                    "ncclBroadcast",
                    (l.broadcast)(s, r, n, dt, root as c_int, *raw, stream),
                ),
                What::AllGather => ("ncclAllGather", (l.all_gather)(s, r, n, dt, *raw, stream)),
                What::ReduceScatter(o) => (
                    "ncclReduceScatter",
                    (l.reduce_scatter)(s, r, n, dt, o as c_int, *raw, stream),
                ),
            }
        };
        check(l, op, name, rc)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        let Ok(l) = lib() else { return };
        if !self.aborted.load(Ordering::Acquire) {
            // SAFETY: a live communicator, never used again.
            let _ = unsafe { (l.destroy)(*self.raw.get_mut()) };
        }
    }
}

fn aborted(op: &'static str) -> Error {
    Error::Device(format!(
        "{op}: the NCCL communicator was aborted after an earlier collective failed or timed out; it cannot be used any more. Create a new process group."
    ))
}

/// What a collective computes (NCCL's operation and its argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum What {
    AllReduce(ncclRedOp_t),
    Broadcast { root: usize },
    AllGather,
    ReduceScatter(ncclRedOp_t),
}

/// A collective as kernel data (a `Kernel::Native` of the CUDA backend): the communicator,
/// what to compute, and the element count and type it is called with
/// (per rank: all_gather's input, reduce_scatter's output).
#[derive(Clone)]
pub(crate) struct Call {
    pub(crate) comm: std::sync::Arc<Comm>,
    pub(crate) what: What,
    pub(crate) op: &'static str,
    pub(crate) count: usize,
    pub(crate) dtype: ncclDataType_t,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}({:?}, {} x {:?}, {:?})",
            self.op, self.what, self.count, self.dtype, self.comm
        )
    }
}

impl crate::device::kernel::NativeKernel for Call {
    fn name(&self) -> &'static str {
        self.op
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// NCCL's type for a dtype (bool as bytes; the caller maps bool's sum and
/// min to max and min: logical or and and, as PyTorch does).
pub(crate) fn nccl_dtype(dtype: DType) -> ncclDataType_t {
    match dtype {
        DType::F32 => ncclDataType_t::ncclFloat32,
        DType::F64 => ncclDataType_t::ncclFloat64,
        DType::F16 => ncclDataType_t::ncclFloat16,
        DType::BF16 => ncclDataType_t::ncclBfloat16,
        DType::I64 => ncclDataType_t::ncclInt64,
        DType::I32 => ncclDataType_t::ncclInt32,
        DType::U8 | DType::Bool => ncclDataType_t::ncclUint8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_names_the_override_first_and_the_wheel() {
        let c = candidates();
        let first = usize::from(std::env::var_os("TENSORGUARD_NCCL_LIB").is_some());
        assert_eq!(c[first].0, PathBuf::from("libnccl.so.2"), "{c:?}");
        assert!(c.iter().any(|(p, _)| p.ends_with("lib/libnccl.so.2")));
        let e = not_found(&[(
            PathBuf::from("libnccl.so.2"),
            "the library path",
            "not found".into(),
        )]);
        assert!(
            e.contains("libnccl.so.2 (the library path: not found)")
                && e.contains("TENSORGUARD_NCCL_LIB")
                && e.contains("nvidia-nccl-cu13"),
            "{e}"
        );
        assert_eq!(version_text(22703), "2.27.3");
    }

    /// Where NCCL is installed (CI's pip wheel, a GPU machine), the library
    /// opens, is new enough and makes ids, without a GPU; elsewhere the
    /// error says where it looked.
    #[test]
    fn nccl_loads_where_installed_and_says_where_it_looked_otherwise() {
        match library() {
            Ok((path, version)) => {
                assert!(path.contains("libnccl.so"), "{path}");
                assert!(version.starts_with("2."), "{version}");
                let (a, b) = (unique_id().unwrap(), unique_id().unwrap());
                assert!(a.iter().any(|&x| x != 0) && a != b);
            }
            Err(e) => {
                if std::env::var_os("TENSORGUARD_REQUIRE_NCCL").is_some() {
                    panic!("TENSORGUARD_REQUIRE_NCCL is set but {e}");
                }
                let e = e.to_string();
                assert!(
                    e.contains("libnccl.so.2") && e.contains("TENSORGUARD_NCCL_LIB"),
                    "{e}"
                );
                println!("skipped: {e}");
            }
        }
    }
}
