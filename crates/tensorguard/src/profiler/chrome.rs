//! The Chrome trace (Trace Event Format, JSON) that Perfetto and
//! `chrome://tracing` open: complete events (`ph: "X"`, `ts`/`dur` in µs)
//! for host events on one track per thread, device kernels on one track per
//! device stream (a process per device), flow arrows from each op to its
//! kernel, and `[memory]` instant events.

use std::fmt::Write;
use std::time::Duration;

use super::table::format_shapes;
use super::{Event, EventKind, Profile};
use crate::device_id::{Device, DeviceKind};

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Microseconds with nanosecond precision.
fn us(d: Duration) -> String {
    format!("{:.3}", d.as_nanos() as f64 / 1e3)
}

/// The trace process of a device's tracks (the host is the real pid).
fn device_pid(d: &Device) -> u64 {
    let (kind, n) = match d {
        Device::Cpu => (0, 0),
        Device::Emulated(n) => (1, *n),
        Device::Cuda(n) => (2, *n),
    };
    0x4000_0000 + kind * 0x1000 + n as u64
}

fn category(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Op => "cpu_op",
        EventKind::UserRange => "user_annotation",
        EventKind::BackwardNode => "backward_node",
        EventKind::Transfer => "transfer",
        EventKind::Memory => "cpu_instant_event",
    }
}

/// The `args` object of a host event.
fn host_args(e: &Event) -> String {
    let mut a: Vec<String> = vec![
        format!("\"External id\": {}", e.id),
        format!("\"device\": {}", json_str(&e.device.to_string())),
    ];
    if !e.input_shapes.is_empty() || !e.input_dtypes.is_empty() {
        a.push(format!(
            "\"Input Dims\": {}",
            format_shapes(&e.input_shapes)
        ));
        let types: Vec<String> = e.input_dtypes.iter().map(|d| json_str(d.name())).collect();
        a.push(format!("\"Input type\": [{}]", types.join(", ")));
    }
    if let Some(site) = e.site {
        a.push(format!(
            "\"Source Location\": {}",
            json_str(&site.to_string())
        ));
    }
    if e.self_cpu_memory != 0 {
        a.push(format!("\"Self CPU Mem\": {}", e.self_cpu_memory));
    }
    if e.self_device_memory != 0 {
        a.push(format!("\"Self Device Mem\": {}", e.self_device_memory));
    }
    if let Some(t) = e.transfer {
        a.push(format!("\"Transfer\": {}", json_str(t.kind.pytorch_name())));
        a.push(format!("\"Bytes\": {}", t.bytes));
        a.push(format!("\"Src\": {}", json_str(&t.src.to_string())));
        a.push(format!("\"Dst\": {}", json_str(&t.dst.to_string())));
    }
    format!("{{{}}}", a.join(", "))
}

pub(crate) fn trace_json(p: &Profile) -> String {
    let host_pid = u64::from(std::process::id());
    let mut ev: Vec<String> = Vec::new();
    let meta = |name: &str, pid: u64, tid: u64, args: String| {
        format!(
            "{{\"ph\": \"M\", \"name\": {}, \"pid\": {pid}, \"tid\": {tid}, \"ts\": 0, \"args\": {args}}}",
            json_str(name)
        )
    };
    ev.push(meta(
        "process_name",
        host_pid,
        0,
        "{\"name\": \"tensorguard host\"}".into(),
    ));
    ev.push(meta(
        "process_labels",
        host_pid,
        0,
        "{\"labels\": \"CPU\"}".into(),
    ));
    for (tid, name) in p.threads() {
        ev.push(meta(
            "thread_name",
            host_pid,
            *tid,
            format!("{{\"name\": {}}}", json_str(name)),
        ));
    }
    let mut tracks: Vec<(Device, u32)> = p
        .events()
        .iter()
        .filter_map(|e| e.device_span.map(|s| (e.device, s.stream)))
        .collect();
    tracks.sort_by_key(|(d, s)| (device_pid(d), *s));
    tracks.dedup();
    let mut last_dev = None;
    for (d, stream) in &tracks {
        let pid = device_pid(d);
        if last_dev != Some(*d) {
            ev.push(meta(
                "process_name",
                pid,
                0,
                format!("{{\"name\": {}}}", json_str(&d.to_string())),
            ));
            let label = match d.kind() {
                DeviceKind::Cuda => "GPU",
                _ => "Device",
            };
            ev.push(meta(
                "process_labels",
                pid,
                0,
                format!("{{\"labels\": {}}}", json_str(label)),
            ));
            last_dev = Some(*d);
        }
        ev.push(meta(
            "thread_name",
            pid,
            u64::from(*stream),
            format!("{{\"name\": \"stream {stream}\"}}"),
        ));
    }
    for e in p.events() {
        if e.kind == EventKind::Memory {
            ev.push(format!(
                "{{\"ph\": \"i\", \"s\": \"t\", \"cat\": \"{}\", \"name\": \"[memory]\", \"pid\": {host_pid}, \"tid\": {}, \"ts\": {}, \"args\": {{\"Device\": {}, \"Bytes\": {}}}}}",
                category(e.kind),
                e.thread,
                us(e.start),
                json_str(&e.device.to_string()),
                e.self_cpu_memory + e.self_device_memory,
            ));
            continue;
        }
        ev.push(format!(
            "{{\"ph\": \"X\", \"cat\": \"{}\", \"name\": {}, \"pid\": {host_pid}, \"tid\": {}, \"ts\": {}, \"dur\": {}, \"args\": {}}}",
            category(e.kind),
            json_str(&e.name),
            e.thread,
            us(e.start),
            us(e.cpu_time()),
            host_args(e),
        ));
        if let Some(s) = e.device_span {
            let pid = device_pid(&e.device);
            ev.push(format!(
                "{{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": {}, \"pid\": {pid}, \"tid\": {}, \"ts\": {}, \"dur\": {}, \"args\": {{\"External id\": {}, \"device\": {}, \"stream\": {}}}}}",
                json_str(&e.name),
                s.stream,
                us(s.start),
                us(s.duration()),
                e.id,
                json_str(&e.device.to_string()),
                s.stream,
            ));
            // the arrow from the launching op to its kernel
            ev.push(format!(
                "{{\"ph\": \"s\", \"id\": {}, \"pid\": {host_pid}, \"tid\": {}, \"ts\": {}, \"cat\": \"ac2g\", \"name\": \"ac2g\"}}",
                e.id,
                e.thread,
                us(e.start)
            ));
            ev.push(format!(
                "{{\"ph\": \"f\", \"id\": {}, \"pid\": {pid}, \"tid\": {}, \"ts\": {}, \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}}",
                e.id,
                s.stream,
                us(s.start)
            ));
        }
    }
    let mut out = String::from("{\n  \"schemaVersion\": 1,\n  \"displayTimeUnit\": \"ms\",\n");
    let _ = writeln!(
        out,
        "  \"record_shapes\": {},\n  \"profile_memory\": {},\n  \"with_stack\": {},",
        u8::from(p.options().record_shapes),
        u8::from(p.options().profile_memory),
        u8::from(p.options().with_stack)
    );
    out.push_str("  \"traceEvents\": [\n    ");
    out.push_str(&ev.join(",\n    "));
    out.push_str("\n  ]\n}\n");
    out
}
