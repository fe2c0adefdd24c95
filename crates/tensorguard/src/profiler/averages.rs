//! `key_averages`: the events of a profile grouped by name (and optionally
//! input shapes or call site), with PyTorch's statistics.

use std::collections::HashMap;
use std::panic::Location;
use std::time::Duration;

use super::{EventKind, Profile};
use crate::device_id::{Device, DeviceKind};

/// What [`Profile::key_averages_by`] groups by besides the name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupBy {
    /// Separate rows per input shapes (PyTorch's `group_by_input_shape`);
    /// the table then shows an `Input Shapes` column.
    pub input_shapes: bool,
    /// Separate rows per call site (PyTorch's `group_by_stack_n=1`); the
    /// table then shows a `Source Location` column.
    pub stack: bool,
}

/// The statistics of one group of events (PyTorch's `FunctionEventAvg`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct KeyAverage {
    /// The events' name.
    pub key: String,
    /// What the events are.
    pub kind: EventKind,
    /// The group's input shapes when grouped by them.
    pub input_shapes: Option<Vec<Vec<usize>>>,
    /// The group's call site when grouped by it.
    pub site: Option<&'static Location<'static>>,
    /// How many events.
    pub count: usize,
    /// Sum of the events' host times.
    pub cpu_time_total: Duration,
    /// Sum of the events' host times minus their children's.
    pub self_cpu_time_total: Duration,
    /// Sum of the device time of the events and everything they enclose.
    pub device_time_total: Duration,
    /// Sum of the events' own kernels' device time.
    pub self_device_time_total: Duration,
    /// Host bytes allocated minus freed, children included.
    pub cpu_memory_usage: i64,
    /// Host bytes allocated minus freed by the events themselves.
    pub self_cpu_memory_usage: i64,
    /// Device bytes allocated minus freed, children included.
    pub device_memory_usage: i64,
    /// Device bytes allocated minus freed by the events themselves.
    pub self_device_memory_usage: i64,
}

impl KeyAverage {
    /// Average host time per call.
    pub fn cpu_time(&self) -> Duration {
        avg(self.cpu_time_total, self.count)
    }

    /// Average device time per call.
    pub fn device_time(&self) -> Duration {
        avg(self.device_time_total, self.count)
    }
}

fn avg(total: Duration, count: usize) -> Duration {
    if count == 0 {
        Duration::ZERO
    } else {
        total / count as u32
    }
}

/// The rows of [`Profile::key_averages`], in order of first occurrence.
#[derive(Clone, Debug)]
pub struct KeyAverages {
    pub(crate) rows: Vec<KeyAverage>,
    pub(crate) device_name: Option<String>,
    pub(crate) profile_memory: bool,
    pub(crate) group_by: GroupBy,
}

type Key = (String, Option<Vec<Vec<usize>>>, Option<(&'static str, u32)>);

impl KeyAverages {
    pub(crate) fn new(profile: &Profile, group_by: GroupBy) -> KeyAverages {
        let mut index: HashMap<Key, usize> = HashMap::new();
        let mut rows: Vec<KeyAverage> = Vec::new();
        let mut device: Option<Device> = None;
        for e in profile.events() {
            let shapes = group_by.input_shapes.then(|| e.input_shapes.clone());
            let site = if group_by.stack { e.site } else { None };
            let key = (
                e.name.to_string(),
                shapes.clone(),
                site.map(|s| (s.file(), s.line())),
            );
            let row = *index.entry(key).or_insert_with(|| {
                rows.push(KeyAverage {
                    key: e.name.to_string(),
                    kind: e.kind,
                    input_shapes: shapes,
                    site,
                    count: 0,
                    cpu_time_total: Duration::ZERO,
                    self_cpu_time_total: Duration::ZERO,
                    device_time_total: Duration::ZERO,
                    self_device_time_total: Duration::ZERO,
                    cpu_memory_usage: 0,
                    self_cpu_memory_usage: 0,
                    device_memory_usage: 0,
                    self_device_memory_usage: 0,
                });
                rows.len() - 1
            });
            let r = &mut rows[row];
            r.count += 1;
            r.cpu_time_total += e.cpu_time();
            r.self_cpu_time_total += profile.self_cpu_time(e);
            r.device_time_total += profile.device_time_total(e);
            r.self_device_time_total += e.self_device_time();
            let (cm, dm) = profile.memory_total(e);
            r.cpu_memory_usage += cm;
            r.device_memory_usage += dm;
            r.self_cpu_memory_usage += e.self_cpu_memory;
            r.self_device_memory_usage += e.self_device_memory;
            if device.is_none()
                && !e.device.is_cpu()
                && (e.device_span.is_some() || e.self_device_memory != 0)
            {
                device = Some(e.device);
            }
        }
        KeyAverages {
            rows,
            device_name: device.map(|d| device_label(d.kind()).to_string()),
            profile_memory: profile.options().profile_memory,
            group_by,
        }
    }

    /// The rows, in order of first occurrence.
    pub fn rows(&self) -> &[KeyAverage] {
        &self.rows
    }

    /// The first row named `key`.
    pub fn get(&self, key: &str) -> Option<&KeyAverage> {
        self.rows.iter().find(|r| r.key == key)
    }

    /// The sum of every row's self host time (the table's `Self CPU time
    /// total`).
    pub fn self_cpu_time_total(&self) -> Duration {
        self.rows.iter().map(|r| r.self_cpu_time_total).sum()
    }

    /// The sum of every row's self device time (the table's `Self EMU time
    /// total`, `Self CUDA time total`).
    pub fn self_device_time_total(&self) -> Duration {
        self.rows.iter().map(|r| r.self_device_time_total).sum()
    }

    /// The device kind in the device columns' headers (`EMU`, `CUDA`), when
    /// any event has device time or device memory.
    pub fn device_name(&self) -> Option<&str> {
        self.device_name.as_deref()
    }
}

/// The upper-case name PyTorch puts in headers (`Self CUDA`).
fn device_label(kind: DeviceKind) -> &'static str {
    match kind {
        DeviceKind::Cpu => "CPU",
        DeviceKind::Emulated => "EMU",
        DeviceKind::Cuda => "CUDA",
    }
}
