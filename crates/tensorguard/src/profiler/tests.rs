//! The profiler as the transfers' observer (`crate::hooks`): a transfer's
//! range and its device work, timed by the code that runs it on a stream.

use std::panic::Location;

use super::{profile, EventKind, ProfileOptions, TransferKind};
use crate::device::registry::backend;
use crate::device_id::Device;
use crate::hooks::transfer_range;

#[test]
fn transfer_range_times_device_work_queued_on_a_stream() {
    let dev = Device::Emulated(0);
    let b = backend(&dev).unwrap();
    let opts = ProfileOptions {
        current_thread_only: true, // other unit tests run ops meanwhile
        ..Default::default()
    };
    let ((), prof) = profile(opts, || {
        let scope = transfer_range("to", Device::Cpu, dev, 4096, Location::caller());
        let timing = scope.as_ref().and_then(|s| s.device_timing(0));
        assert!(timing.is_some());
        b.host_fn(
            0,
            "copy",
            Location::caller(),
            Box::new(move || {
                let start = std::time::Instant::now();
                std::thread::sleep(std::time::Duration::from_millis(2));
                if let Some(t) = &timing {
                    t.stamp(start, std::time::Instant::now());
                }
                Ok(())
            }),
        )?;
        Ok(())
    })
    .unwrap();
    let t: Vec<_> = prof.transfers().collect();
    assert_eq!(t.len(), 1);
    let e = t[0];
    assert_eq!(e.kind, EventKind::Transfer);
    let info = e.transfer.unwrap();
    assert_eq!((info.kind, info.bytes), (TransferKind::HostToDevice, 4096));
    // the profile waited for the copy: its device time is there
    let span = e.device_span.expect("the copy's device time");
    assert_eq!(span.stream, 0);
    assert!(span.duration() >= std::time::Duration::from_millis(2));
    assert_eq!(
        prof.key_averages()
            .get("to")
            .unwrap()
            .self_device_time_total,
        span.duration()
    );
    // off: no range, nothing to time
    assert!(transfer_range("to", Device::Cpu, dev, 1, Location::caller()).is_none());
}
