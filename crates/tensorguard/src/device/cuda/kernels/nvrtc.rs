//! Compiling the CUDA C sources with NVRTC, caching the binaries, loading
//! modules.
//!
//! A source is compiled at first use, for the GPU's own `sm_XY` into a
//! CUBIN (a PTX from an NVRTC newer than the driver would not load), or,
//! when NVRTC does not know the GPU, into PTX for the newest architecture
//! it knows, which the driver compiles on load. A large source is compiled
//! in *parts* (`-DTG_PART=k`, see `elementwise.cu`), so a process compiles
//! only what it uses.
//!
//! Binaries are cached in memory (per process, shared by GPUs of one
//! architecture) and on disk, keyed by a hash of the source text and the
//! options, the architecture and NVRTC's version, in
//! `$TENSORGUARD_KERNEL_CACHE`, `$XDG_CACHE_HOME/tensorguard/kernels` or
//! `$HOME/.cache/tensorguard/kernels`. A cache entry is written to a
//! temporary file and renamed; an unreadable or corrupt one is recompiled;
//! a directory that cannot be written only costs the cache.

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use cudarc::driver::{result as drv, sys};
use cudarc::nvrtc::{result as rtc, sys as rtc_sys};
use parking_lot::{Mutex, RwLock};

use super::source::Source;
use crate::error::{Error, Result};

/// A driver handle that the driver lets any thread use (the context is
/// made current by the caller).
#[derive(Clone, Copy)]
struct Handle<T>(T);
// SAFETY: CUmodule and CUfunction are opaque driver handles, valid in
// every thread of the process; the driver synchronises their use.
unsafe impl<T> Send for Handle<T> {}
// SAFETY: as above; the handles are only copied, never dereferenced here.
unsafe impl<T> Sync for Handle<T> {}

/// Loaded modules per (source, part).
type ModuleMap = HashMap<(Source, Option<u32>), Handle<sys::CUmodule>>;

/// The compiled modules of one GPU.
pub(crate) struct Modules {
    /// The GPU's index (for errors).
    index: usize,
    /// Where binaries are cached on disk (`None`: no disk cache).
    cache_dir: Option<PathBuf>,
    /// Functions already looked up, per source (the launch path reads only this).
    functions: RwLock<[HashMap<String, Handle<sys::CUfunction>>; 3]>,
    /// Loaded modules per (source, part); the lock also serialises loads.
    modules: Mutex<ModuleMap>,
}

impl Modules {
    /// Nothing is compiled until first use; binaries are cached in the
    /// default directory ([`default_cache_dir`]).
    pub(crate) fn new(index: usize) -> Modules {
        Modules::with_cache_dir(index, default_cache_dir())
    }

    /// As [`Modules::new`], caching binaries in `cache_dir` (`None`: no disk cache).
    pub(crate) fn with_cache_dir(index: usize, cache_dir: Option<PathBuf>) -> Modules {
        Modules {
            index,
            cache_dir,
            functions: RwLock::new(Default::default()),
            modules: Mutex::new(HashMap::new()),
        }
    }

    /// The kernel `name` of `src`, compiled for sm_{cc.0}{cc.1} (cached:
    /// memory, then disk), loaded in the current context.
    pub(crate) fn function(
        &self,
        cc: (u32, u32),
        src: Source,
        name: &str,
    ) -> Result<sys::CUfunction> {
        if let Some(f) = self.functions.read()[src as usize].get(name) {
            return Ok(f.0);
        }
        self.load_function(cc, src, name)
    }

    /// The slow path of [`Modules::function`]: compile or read the part,
    /// load it, look the function up.
    #[cold]
    fn load_function(&self, cc: (u32, u32), src: Source, name: &str) -> Result<sys::CUfunction> {
        let part = src.part(name);
        let module = {
            let mut modules = self.modules.lock();
            match modules.get(&(src, part)) {
                Some(m) => m.0,
                None => {
                    let m = self.load_module(cc, src, part)?;
                    modules.insert((src, part), Handle(m));
                    m
                }
            }
        };
        let cname = CString::new(name).map_err(|_| missing(src, name, self.index, "bad name"))?;
        // SAFETY: `module` was loaded by `load_module` and is never unloaded.
        let f = unsafe { drv::module::get_function(module, cname) }
            .map_err(|e| missing(src, name, self.index, &format!("{e:?}")))?;
        self.functions.write()[src as usize].insert(name.to_string(), Handle(f));
        Ok(f)
    }

    /// Load the binary of (src, part) in the current context; a cached
    /// binary the driver refuses is recompiled once.
    fn load_module(&self, cc: (u32, u32), src: Source, part: Option<u32>) -> Result<sys::CUmodule> {
        let image = image(src, part, cc, self.cache_dir.as_deref())?;
        match load(&image) {
            Ok(m) => Ok(m),
            Err(first) => {
                let fresh = Arc::new(compile(src, part, &image.target)?);
                remember(src, part, cc, Arc::clone(&fresh));
                if let Some(dir) = &self.cache_dir {
                    store(dir, &cache_name(src, part, &image.target), &fresh.bytes);
                }
                load(&fresh).map_err(|e| {
                    Error::Device(format!(
                        "the CUDA driver could not load the kernels of {} (compiled by NVRTC {} for {}) on cuda:{}: {e:?} (first try: {first:?}). Update the NVIDIA driver to one that supports this NVRTC (or use an NVRTC no newer than the driver).",
                        src.file(),
                        image.target.nvrtc_text(),
                        image.target.arch,
                        self.index
                    ))
                })
            }
        }
    }
}

fn missing(src: Source, name: &str, index: usize, why: &str) -> Error {
    Error::Device(format!(
        "internal error: the CUDA kernel `{name}` is not in {} as compiled for cuda:{index} ({why}). This is a bug in tensorguard; please report it.",
        src.file()
    ))
}

fn load(image: &Image) -> std::result::Result<sys::CUmodule, drv::DriverError> {
    // SAFETY: `bytes` is a complete CUBIN, or a PTX text ending in NUL
    // (`compile` and `read_cached` ensure both); the context is current on
    // this thread by the kernels' contract.
    unsafe { drv::module::load_data(image.bytes.as_ptr().cast()) }
}

/// The default disk cache directory: `$TENSORGUARD_KERNEL_CACHE`,
/// `$XDG_CACHE_HOME/tensorguard/kernels` or `$HOME/.cache/tensorguard/kernels`.
pub(crate) fn default_cache_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var("TENSORGUARD_KERNEL_CACHE") {
        return Some(d);
    }
    if let Some(d) = var("XDG_CACHE_HOME").filter(|d| d.is_absolute()) {
        return Some(d.join("tensorguard").join("kernels"));
    }
    var("HOME").map(|h| h.join(".cache").join("tensorguard").join("kernels"))
}

/// What a binary is compiled for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// `sm_90` (CUBIN) or `compute_90` (PTX).
    pub arch: String,
    /// True for a CUBIN, false for PTX.
    pub cubin: bool,
    /// NVRTC's version.
    pub nvrtc: (i32, i32),
}

impl Target {
    fn nvrtc_text(&self) -> String {
        format!("{}.{}", self.nvrtc.0, self.nvrtc.1)
    }
}

/// A compiled binary.
pub(crate) struct Image {
    /// What it was compiled for.
    pub target: Target,
    /// The CUBIN, or the PTX text with a trailing NUL.
    pub bytes: Vec<u8>,
}

/// Where a binary came from (for the cache test).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Compiled by NVRTC now.
    Compiled,
    /// Read from the disk cache.
    Disk,
}

type ImageKey = (Source, Option<u32>, (u32, u32));

/// The process-wide memory cache; its lock also serialises compiles.
fn images() -> &'static Mutex<HashMap<ImageKey, Arc<Image>>> {
    static IMAGES: OnceLock<Mutex<HashMap<ImageKey, Arc<Image>>>> = OnceLock::new();
    IMAGES.get_or_init(|| Mutex::new(HashMap::new()))
}

fn remember(src: Source, part: Option<u32>, cc: (u32, u32), image: Arc<Image>) {
    images().lock().insert((src, part, cc), image);
}

/// The binary of (src, part) for `cc`: from memory, the disk cache, or NVRTC.
fn image(src: Source, part: Option<u32>, cc: (u32, u32), dir: Option<&Path>) -> Result<Arc<Image>> {
    let mut cache = images().lock();
    if let Some(img) = cache.get(&(src, part, cc)) {
        return Ok(Arc::clone(img));
    }
    let (img, _) = image_from_disk_or_nvrtc(src, part, cc, dir)?;
    let img = Arc::new(img);
    cache.insert((src, part, cc), Arc::clone(&img));
    Ok(img)
}

/// The disk layer: read the cached binary, or compile and store it.
pub(crate) fn image_from_disk_or_nvrtc(
    src: Source,
    part: Option<u32>,
    cc: (u32, u32),
    dir: Option<&Path>,
) -> Result<(Image, Origin)> {
    let target = target(cc)?;
    let name = cache_name(src, part, &target);
    if let Some(bytes) = dir.and_then(|d| read_cached(&d.join(&name), target.cubin)) {
        return Ok((Image { target, bytes }, Origin::Disk));
    }
    let img = compile(src, part, &target)?;
    if let Some(d) = dir {
        store(d, &name, &img.bytes);
    }
    Ok((img, Origin::Compiled))
}

/// NVRTC's library, or an error that says what was searched.
fn nvrtc_present() -> Result<()> {
    // SAFETY: only tries to open the library by name (no symbol is called).
    if unsafe { rtc_sys::is_culib_present() } {
        return Ok(());
    }
    let mut searched: Vec<String> = Vec::new();
    for n in cudarc::get_lib_name_candidates("nvrtc") {
        if !searched.contains(&n) {
            searched.push(n);
        }
    }
    Err(Error::Device(format!(
        "the CUDA kernels cannot be compiled: the NVRTC library could not be loaded (names searched: {}). libnvrtc.so.13 comes with the CUDA toolkit or the pip package nvidia-cuda-nvrtc; add the directory that holds it to LD_LIBRARY_PATH.",
        searched.join(", ")
    )))
}

/// NVRTC's version (the library is present).
fn nvrtc_version() -> (i32, i32) {
    static V: OnceLock<(i32, i32)> = OnceLock::new();
    *V.get_or_init(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: the library is present (checked by the caller); the call
        // writes two ints through valid pointers.
        let r = unsafe { rtc_sys::nvrtcVersion(&mut major, &mut minor) };
        if r == rtc_sys::nvrtcResult::NVRTC_SUCCESS {
            (major, minor)
        } else {
            (0, 0)
        }
    })
}

/// The architectures NVRTC can compile for (e.g. 75, 80, 90, 100).
fn supported_archs() -> Vec<i32> {
    let mut n = 0;
    // SAFETY: the library is present; writes one int.
    let r = unsafe { rtc_sys::nvrtcGetNumSupportedArchs(&mut n) };
    if r != rtc_sys::nvrtcResult::NVRTC_SUCCESS || n <= 0 {
        return Vec::new();
    }
    let mut archs = vec![0i32; n as usize];
    // SAFETY: `archs` has room for the `n` ints NVRTC reported.
    let r = unsafe { rtc_sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
    if r != rtc_sys::nvrtcResult::NVRTC_SUCCESS {
        return Vec::new();
    }
    archs
}

/// What to compile for a GPU of compute capability `cc`.
pub(crate) fn target(cc: (u32, u32)) -> Result<Target> {
    nvrtc_present()?;
    choose_target(cc, &supported_archs(), nvrtc_version())
}

/// The GPU's own `sm_XY` CUBIN when NVRTC supports it (or cannot say),
/// else PTX for the newest older architecture NVRTC knows.
fn choose_target(cc: (u32, u32), archs: &[i32], nvrtc: (i32, i32)) -> Result<Target> {
    let arch = (cc.0 * 10 + cc.1) as i32;
    if archs.is_empty() || archs.contains(&arch) {
        return Ok(Target {
            arch: format!("sm_{arch}"),
            cubin: true,
            nvrtc,
        });
    }
    match archs.iter().copied().filter(|&a| a < arch).max() {
        Some(best) => Ok(Target {
            arch: format!("compute_{best}"),
            cubin: false,
            nvrtc,
        }),
        None => Err(Error::Device(format!(
            "NVRTC {}.{} cannot compile CUDA kernels for this GPU (sm_{arch}): the oldest architecture it supports is sm_{}. Use an NVRTC that supports sm_{arch} (an older CUDA toolkit or nvidia-cuda-nvrtc package) on LD_LIBRARY_PATH.",
            nvrtc.0,
            nvrtc.1,
            archs.iter().min().copied().unwrap_or(0)
        ))),
    }
}

/// NVRTC's options for `target` and `part`.
fn options(part: Option<u32>, target: &Target) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={}", target.arch),
        "-std=c++17".to_string(),
        // no a*b+c contraction: results match the cpu's separate roundings
        "--fmad=false".to_string(),
    ];
    if let Some(p) = part {
        o.push(format!("-DTG_PART={p}"));
    }
    o
}

/// 64-bit FNV-1a (stable across Rust versions, unlike `DefaultHasher`).
fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The cache file name of (src, part) for `target`.
fn cache_name(src: Source, part: Option<u32>, target: &Target) -> String {
    let text = src.text();
    let opts = options(part, target).join(" ");
    let hash = fnv64(&[text.as_bytes(), opts.as_bytes()]);
    let stem = src.file().trim_end_matches(".cu");
    let part = part.map_or(String::new(), |p| format!("-p{p}"));
    let ext = if target.cubin { "cubin" } else { "ptx" };
    format!(
        "{stem}{part}-{hash:016x}-{}-nvrtc{}.{ext}",
        target.arch,
        target.nvrtc_text()
    )
}

/// Cache files start with this, then the payload's length and FNV hash.
const MAGIC: &[u8; 8] = b"TGKERN01";

/// The payload of a cache file, if it is complete and intact.
fn read_cached(path: &Path, cubin: bool) -> Option<Vec<u8>> {
    let data = std::fs::read(path).ok()?;
    let header = data.get(..24)?;
    if &header[..8] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(header[8..16].try_into().ok()?) as usize;
    let hash = u64::from_le_bytes(header[16..24].try_into().ok()?);
    let payload = &data[24..];
    if payload.len() != len || fnv64(&[payload]) != hash {
        return None;
    }
    let ok = if cubin {
        payload.starts_with(b"\x7fELF")
    } else {
        payload.last() == Some(&0)
    };
    ok.then(|| payload.to_vec())
}

/// Write a cache file (temporary file, then rename); failures are ignored
/// (the cache is only an optimisation).
fn store(dir: &Path, name: &str, payload: &[u8]) {
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = dir.join(format!("{name}.{}.{nanos}.tmp", std::process::id()));
        let mut data = Vec::with_capacity(24 + payload.len());
        data.extend_from_slice(MAGIC);
        data.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        data.extend_from_slice(&fnv64(&[payload]).to_le_bytes());
        data.extend_from_slice(payload);
        std::fs::write(&tmp, &data)?;
        let r = std::fs::rename(&tmp, dir.join(name));
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    };
    if let Err(e) = write() {
        log::debug!(
            "tensorguard: the CUDA kernel cache {} cannot be written ({e}); kernels will be compiled again next time",
            dir.display()
        );
    }
}

/// Compile (src, part) for `target` with NVRTC.
pub(crate) fn compile(src: Source, part: Option<u32>, target: &Target) -> Result<Image> {
    nvrtc_present()?;
    let fail = |what: String, log: String| Error::KernelCompile {
        file: src.file(),
        arch: target.arch.clone(),
        nvrtc: target.nvrtc_text(),
        status: what,
        log,
    };
    let text = CString::new(src.text()).map_err(|e| fail(format!("{e}"), String::new()))?;
    let name = CString::new(src.file()).map_err(|e| fail(format!("{e}"), String::new()))?;
    let prog = rtc::create_program(&text, Some(&name))
        .map_err(|e| fail(format!("{e:?}"), String::new()))?;
    let opts = options(part, target);
    // SAFETY: `prog` was just created and is destroyed once, below.
    let compiled = unsafe { rtc::compile_program(prog, &opts) };
    let result = match compiled {
        Ok(()) => {
            // SAFETY: `prog` is alive and compiled.
            unsafe { binary(prog, target.cubin) }.map_err(|e| fail(format!("{e:?}"), String::new()))
        }
        Err(e) => {
            // SAFETY: `prog` is alive.
            let log = unsafe { rtc::get_program_log(prog) }
                .map(|l| c_text(&l))
                .unwrap_or_default();
            Err(fail(format!("{e:?}"), log))
        }
    };
    // SAFETY: `prog` is alive and not used afterwards.
    let _ = unsafe { rtc::destroy_program(prog) };
    Ok(Image {
        target: target.clone(),
        bytes: result?,
    })
}

/// The CUBIN, or the PTX with its trailing NUL, of a compiled program.
///
/// # Safety
/// `prog` must be a live, successfully compiled program.
unsafe fn binary(
    prog: rtc_sys::nvrtcProgram,
    cubin: bool,
) -> std::result::Result<Vec<u8>, rtc::NvrtcError> {
    if !cubin {
        // SAFETY: guaranteed by the caller.
        let ptx = unsafe { rtc::get_ptx(prog) }?;
        let mut bytes: Vec<u8> = ptx.iter().map(|&c| c as u8).collect();
        if bytes.last() != Some(&0) {
            bytes.push(0);
        }
        return Ok(bytes);
    }
    let mut size = 0usize;
    // SAFETY: guaranteed by the caller; writes one usize.
    unsafe { rtc_sys::nvrtcGetCUBINSize(prog, &mut size) }.result()?;
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` has the size NVRTC reported.
    unsafe { rtc_sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast::<c_char>()) }.result()?;
    Ok(bytes)
}

/// A NUL-terminated C string as text.
fn c_text(s: &[c_char]) -> String {
    let bytes: Vec<u8> = s
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
#[path = "nvrtc_tests.rs"]
mod tests;

/// One part compiled (or found in the cache) by [`precompile`].
pub(crate) struct Unit {
    /// The source.
    pub src: Source,
    /// Its part.
    pub part: u32,
    /// Whether NVRTC compiled it now or the disk cache had it.
    pub origin: Origin,
    /// How long it took.
    pub time: std::time::Duration,
}

/// Compile every part of every source for `cc` into the disk cache `dir`
/// (parts already there are read back), on `threads` threads: what a first
/// launch would do, ahead of time. Needs NVRTC, not a GPU.
pub(crate) fn precompile(cc: (u32, u32), dir: &Path, threads: usize) -> Result<Vec<Unit>> {
    let units: Vec<(Source, u32)> = Source::ALL
        .iter()
        .flat_map(|&s| s.parts().map(move |p| (s, p)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Mutex<Vec<Result<Unit>>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, units.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(src, part)) = units.get(i) else {
                    break;
                };
                let start = std::time::Instant::now();
                let r =
                    image_from_disk_or_nvrtc(src, Some(part), cc, Some(dir)).map(|(_, origin)| {
                        Unit {
                            src,
                            part,
                            origin,
                            time: start.elapsed(),
                        }
                    });
                done.lock().push(r);
            });
        }
    });
    let mut out = done
        .into_inner()
        .into_iter()
        .collect::<Result<Vec<Unit>>>()?;
    out.sort_by_key(|u| (u.src as usize, u.part));
    Ok(out)
}
