//! Configuration of the emulated accelerators: how many, and how much memory
//! each has. Fixed at first use of any emulated device.

use parking_lot::Mutex;

use super::backend::emulated_started;
use crate::error::{Error, Result};
use crate::memory::parse_bytes;

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

impl EmulatedConfig {
    /// `count` devices of `capacity` bytes each.
    pub fn uniform(count: usize, capacity: usize) -> Self {
        EmulatedConfig {
            capacities: vec![capacity; count],
        }
    }

    /// Parse `NxSIZE` (e.g. `2x4GiB`) or a comma-separated list of sizes.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(
                "EmulatedConfig::parse",
                format!("`{s}` is not an emulated-device configuration. Write `COUNTxSIZE` like `2x4GiB`, or one size per device like `4GiB,512MiB`."),
            )
        };
        if let Some((count, size)) = s.split_once(['x', 'X']) {
            let count: usize = count.trim().parse().map_err(|_| bad())?;
            let size = parse_bytes(size).map_err(|_| bad())?;
            return Ok(EmulatedConfig::uniform(count, size));
        }
        let capacities = s
            .split(',')
            .map(parse_bytes)
            .collect::<Result<Vec<_>>>()
            .map_err(|_| bad())?;
        Ok(EmulatedConfig { capacities })
    }
}

static CONFIG: Mutex<Option<EmulatedConfig>> = Mutex::new(None);

/// Set the emulated devices before any of them is used.
///
/// Fails once an emulated device has been used: the devices and their
/// allocators exist from then on.
pub fn configure_emulated(config: EmulatedConfig) -> Result<()> {
    let mut slot = CONFIG.lock();
    if emulated_started() {
        return Err(Error::Device(
            "the emulated devices are already in use, so their configuration can no longer change. Call `configure_emulated` before creating any tensor on an emulated device, or set TENSORGUARD_EMULATED.".into(),
        ));
    }
    *slot = Some(config);
    Ok(())
}

pub(crate) fn emulated_config() -> EmulatedConfig {
    if let Some(c) = CONFIG.lock().clone() {
        return c;
    }
    match std::env::var("TENSORGUARD_EMULATED") {
        Ok(v) => EmulatedConfig::parse(&v).unwrap_or_else(|e| {
            crate::warnings::warn(
                "tensorguard::device",
                format_args!("TENSORGUARD_EMULATED: {e} Using the default configuration."),
            );
            EmulatedConfig::default()
        }),
        Err(_) => EmulatedConfig::default(),
    }
}
