//! Configuration of the emulated accelerators: how many, and how much memory
//! each has. Fixed at first use of any emulated device.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::memory::alloc::parse_bytes;

/// How many emulated devices exist and the memory capacity of each.
///
/// The default is two devices of 4 GiB (memory is taken from the host only
/// as tensors need it). The environment variable `TENSORGUARD_EMULATED`
/// overrides it, as `2x4GiB` (count x capacity) or `4GiB,512MiB` (one
/// capacity per device); [`configure_emulated`] overrides both.
///
/// ```
/// use tensorguard::device::EmulatedConfig;
/// let c = EmulatedConfig::parse("2x512MiB").unwrap();
/// assert_eq!(c.capacities, vec![512 << 20, 512 << 20]);
/// assert_eq!(EmulatedConfig::parse("1GiB,64MiB").unwrap().capacities, vec![1 << 30, 64 << 20]);
/// assert!(EmulatedConfig::parse("lots").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmulatedConfig {
    /// Capacity in bytes of `emu:0`, `emu:1`, ...
    pub capacities: Vec<usize>,
}

impl Default for EmulatedConfig {
    fn default() -> Self {
        EmulatedConfig::uniform(2, 4 << 30)
    }
}

/// The most emulated devices a configuration may have (each stream of a
/// device is a host thread).
pub const MAX_EMULATED_DEVICES: usize = 64;

/// The largest capacity of one emulated device: 1 PiB (memory is taken from
/// the host only as tensors need it, but sizes past this are typos).
pub const MAX_EMULATED_CAPACITY: usize = 1 << 50;

impl EmulatedConfig {
    /// `count` devices of `capacity` bytes each (checked by
    /// [`configure_emulated`] and [`EmulatedConfig::validate`]).
    pub fn uniform(count: usize, capacity: usize) -> Self {
        EmulatedConfig {
            capacities: vec![capacity; count],
        }
    }

    /// Parse `NxSIZE` (e.g. `2x4GiB`) or a comma-separated list of sizes.
    /// The result is [validated](EmulatedConfig::validate): 1 to
    /// [`MAX_EMULATED_DEVICES`] devices of 1 byte to
    /// [`MAX_EMULATED_CAPACITY`] each.
    ///
    /// ```
    /// use tensorguard::device::EmulatedConfig;
    /// assert!(EmulatedConfig::parse("4294967296x1KiB").is_err()); // too many devices
    /// assert!(EmulatedConfig::parse("0x1GiB").is_err());
    /// assert!(EmulatedConfig::parse("2x0").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: String| {
            Error::invalid(
                "EmulatedConfig::parse",
                format!("`{s}` is not an emulated-device configuration: {why} Write `COUNTxSIZE` like `2x4GiB`, or one size per device like `4GiB,512MiB`."),
            )
        };
        let config = if let Some((count, size)) = s.split_once(['x', 'X']) {
            let count: usize = count
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{}` is not a number of devices.", count.trim())))?;
            // checked before anything the size of `count` is built
            check_count(count).map_err(bad)?;
            let size = parse_bytes(size).map_err(|e| bad(reason(e)))?;
            EmulatedConfig::uniform(count, size)
        } else {
            let capacities = s
                .split(',')
                .map(parse_bytes)
                .collect::<Result<Vec<_>>>()
                .map_err(|e| bad(reason(e)))?;
            EmulatedConfig { capacities }
        };
        config.check().map_err(bad)?;
        Ok(config)
    }

    /// `Ok` when this configuration can be used: 1 to
    /// [`MAX_EMULATED_DEVICES`] devices, each of 1 byte to
    /// [`MAX_EMULATED_CAPACITY`].
    pub fn validate(&self) -> Result<()> {
        self.check().map_err(|why| {
            Error::invalid(
                "configure_emulated",
                format!("{why} Use e.g. `EmulatedConfig::uniform(2, 4 << 30)`."),
            )
        })
    }

    fn check(&self) -> std::result::Result<(), String> {
        check_count(self.capacities.len())?;
        for (i, &cap) in self.capacities.iter().enumerate() {
            if cap == 0 || cap > MAX_EMULATED_CAPACITY {
                return Err(format!(
                    "emu:{i} would have a capacity of {cap} bytes, but a capacity must be between 1 byte and {} ({MAX_EMULATED_CAPACITY} bytes).",
                    crate::memory::alloc::format_bytes(MAX_EMULATED_CAPACITY as u64)
                ));
            }
        }
        Ok(())
    }
}

fn check_count(count: usize) -> std::result::Result<(), String> {
    if count == 0 || count > MAX_EMULATED_DEVICES {
        return Err(format!(
            "{count} devices were asked for, but there can be 1 to {MAX_EMULATED_DEVICES} emulated devices (each runs its streams on host threads)."
        ));
    }
    Ok(())
}

/// The explanation inside an `InvalidArgument` (without its op prefix).
fn reason(e: Error) -> String {
    match e {
        Error::InvalidArgument { message, .. } => message,
        other => other.to_string(),
    }
}

static CONFIG: Mutex<Option<EmulatedConfig>> = Mutex::new(None);

/// Set the emulated devices before any of them is used.
///
/// Fails once an emulated device has been used: the devices and their
/// allocators exist from then on.
pub fn configure_emulated(config: EmulatedConfig) -> Result<()> {
    config.validate()?;
    let mut slot = CONFIG.lock();
    if emulated_started() {
        return Err(Error::Device(
            "the emulated devices are already in use, so their configuration can no longer change. Call `configure_emulated` before creating any tensor on an emulated device, or set TENSORGUARD_EMULATED.".into(),
        ));
    }
    *slot = Some(config);
    Ok(())
}

/// The configuration of the emulated devices: the one given to
/// [`configure_emulated`], else `TENSORGUARD_EMULATED`'s, else the default
/// (two devices of 4 GiB). An invalid `TENSORGUARD_EMULATED` is an error
/// here, and every use of an emulated device returns it (`tensorguard
/// doctor` prints it).
///
/// ```
/// let config = tensorguard::device::emulated_config();
/// assert!(config.is_ok_and(|c| !c.capacities.is_empty()));
/// ```
pub fn emulated_config() -> Result<EmulatedConfig> {
    configured(&CONFIG.lock())
}

/// The configuration given (`set`), else the environment's, else the
/// default.
fn configured(set: &Option<EmulatedConfig>) -> Result<EmulatedConfig> {
    if let Some(c) = set {
        return Ok(c.clone());
    }
    match std::env::var("TENSORGUARD_EMULATED") {
        Ok(v) => EmulatedConfig::parse(&v).map_err(|e| {
            Error::Device(format!(
                "TENSORGUARD_EMULATED={v} is invalid, so no emulated device exists: {}",
                reason(e)
            ))
        }),
        Err(_) => Ok(EmulatedConfig::default()),
    }
}

/// Whether the emulated devices were made from the configuration (set under
/// `CONFIG`'s lock, so a [`configure_emulated`] either comes first or fails).
static STARTED: AtomicBool = AtomicBool::new(false);

/// The configuration the emulated devices are made from, once (the
/// registry's first use of an emulated device): later calls to
/// [`configure_emulated`] fail.
pub(super) fn start_emulated() -> Result<EmulatedConfig> {
    let slot = CONFIG.lock();
    STARTED.store(true, Ordering::Release);
    configured(&slot)
}

/// True once the emulated devices exist (their configuration is fixed).
pub(crate) fn emulated_started() -> bool {
    STARTED.load(Ordering::Acquire)
}
