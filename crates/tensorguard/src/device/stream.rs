//! Streams and events: ordered queues of device work, and markers in them.
//!
//! Ops on a device go to its *current* stream (per thread, like PyTorch's).
//! Work on different streams runs concurrently; `wait_stream` and events
//! order it. On the cpu every stream is the one synchronous stream.

use std::cell::RefCell;
use std::panic::Location;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::registry::{backend, stream_wait_event};
use crate::device_id::{Device, StreamId};
use crate::error::{Error, Result};

thread_local! {
    /// The live stream guards of this thread, oldest first: (guard id,
    /// device, stream). A device's current stream is that of its newest
    /// live guard, whatever order guards are dropped in.
    static CURRENT: RefCell<Vec<(u64, Device, StreamId)>> = const { RefCell::new(Vec::new()) };
    static NEXT_GUARD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The current stream of `device` on this thread (0 unless a
/// [`StreamGuard`] is alive).
pub(crate) fn current_stream_id(device: &Device) -> StreamId {
    if device.is_cpu() {
        return 0;
    }
    CURRENT.with(|c| {
        c.borrow()
            .iter()
            .rev()
            .find(|(_, d, _)| d == device)
            .map_or(0, |e| e.2)
    })
}

/// Make stream `id` of `device` current on this thread until the guard
/// drops (crate-internal: a read ordered after a write on its stream).
pub(crate) fn stream_guard(device: Device, id: StreamId) -> StreamGuard {
    StreamGuard {
        id: push_current(device, id),
        _not_send: std::marker::PhantomData,
    }
}

/// Push a guard's entry; returns its id.
fn push_current(device: Device, id: StreamId) -> u64 {
    let gid = NEXT_GUARD.with(|n| {
        let g = n.get();
        n.set(g + 1);
        g
    });
    CURRENT.with(|c| c.borrow_mut().push((gid, device, id)));
    gid
}

/// Remove the entry of guard `gid` (wherever it is in the stack).
fn pop_current(gid: u64) {
    // `try_with`: a guard dropped while the thread's locals are destroyed
    let _ = CURRENT.try_with(|c| {
        let mut c = c.borrow_mut();
        if let Some(i) = c.iter().rposition(|e| e.0 == gid) {
            c.remove(i);
        }
    });
}

/// An ordered queue of work on a device (PyTorch's `torch.cuda.Stream`).
///
/// ```
/// use tensorguard::{device::Stream, DType, Device, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let dev = Device::Emulated(0);
/// let side = Stream::new(&dev)?;
/// let x = {
///     let _g = side.make_current();          // like `with torch.cuda.stream(side):`
///     Tensor::ones([4], DType::F32, &dev)?.mul(3.0)?
/// };
/// Stream::current(&dev).wait_stream(&side)?; // order the default stream after it
/// assert_eq!(x.add(1.0)?.to_vec::<f32>()?, vec![4.0; 4]);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stream {
    device: Device,
    id: StreamId,
}

impl Stream {
    /// A stream for concurrent work on `device`, from the device's pool.
    pub fn new(device: &Device) -> Result<Stream> {
        let id = backend(device)?.new_stream()?;
        Ok(Stream {
            device: *device,
            id,
        })
    }

    /// The default stream of `device`.
    pub fn default_stream(device: &Device) -> Stream {
        Stream {
            device: *device,
            id: 0,
        }
    }

    /// The current stream of `device` on this thread.
    pub fn current(device: &Device) -> Stream {
        Stream {
            device: *device,
            id: current_stream_id(device),
        }
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The stream's number on its device (0 is the default stream).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Make this the current stream of its device on this thread until the
    /// guard is dropped (PyTorch's `with torch.cuda.stream(s):`).
    ///
    /// Guards nest like PyTorch's context managers, and may be dropped in
    /// any order: the current stream is always that of the most recently
    /// created guard of the device that is still alive.
    pub fn make_current(&self) -> StreamGuard {
        StreamGuard {
            id: push_current(self.device, self.id),
            _not_send: std::marker::PhantomData,
        }
    }

    /// Make future work on `self` wait until the work queued on `other` so
    /// far has completed. The host does not block.
    #[track_caller]
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        self.same_device("wait_stream", other)?;
        let b = backend(&self.device)?;
        stream_wait_event(
            b,
            self.id,
            &other.device,
            other.id,
            b.record_event(other.id),
        )
    }

    /// Make future work on `self` wait for `event`.
    #[track_caller]
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        event.wait(self)
    }

    /// Block the host until everything queued on this stream has run. A
    /// fault raised by that work is returned here, naming the op and its
    /// call site.
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        let _sync =
            crate::transfer::sync_scope("Stream::synchronize", self.device, Location::caller())?;
        let b = backend(&self.device)?;
        b.event_synchronize(self.id, b.record_event(self.id))
    }

    /// True when everything queued on this stream has completed.
    pub fn query(&self) -> bool {
        backend(&self.device).is_ok_and(|b| b.event_query(self.id, b.record_event(self.id)))
    }

    /// Record a new event at the current end of this stream.
    #[track_caller]
    pub fn record_event(&self) -> Result<Event> {
        let e = Event::new(false);
        e.record(self)?;
        Ok(e)
    }

    #[track_caller]
    fn same_device(&self, op: &'static str, other: &Stream) -> Result<()> {
        if self.device != other.device {
            return Err(Error::DeviceMismatch {
                op,
                arg: "other",
                expected: self.device,
                found: other.device,
                location: Location::caller(),
            });
        }
        Ok(())
    }
}

/// Keeps a stream current while it lives; when dropped, the device's
/// current stream is that of the newest guard still alive (or the default
/// stream). The current stream is per thread, so the guard cannot be sent
/// to another thread.
#[must_use = "the stream stays current only while the guard lives"]
pub struct StreamGuard {
    id: u64,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        pop_current(self.id);
    }
}

struct EventInner {
    timing: bool,
    mark: Mutex<Option<(Device, StreamId, u64)>>,
    time: Arc<Mutex<Option<Instant>>>,
}

/// A marker in a stream (PyTorch's `torch.cuda.Event`): record it, wait for
/// it on another stream or on the host, and time the work between two.
///
/// ```
/// use tensorguard::{device::{Event, Stream}, DType, Device, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let dev = Device::Emulated(0);
/// let s = Stream::current(&dev);
/// let (start, end) = (Event::new(true), Event::new(true));
/// start.record(&s)?;
/// let y = Tensor::ones([256, 256], DType::F32, &dev)?.matmul(&Tensor::ones([256, 256], DType::F32, &dev)?)?;
/// end.record(&s)?;
/// end.synchronize()?;
/// assert!(start.elapsed_time(&end)? >= 0.0);
/// assert_eq!(y.sum()?.item::<f32>()?, 256.0 * 256.0 * 256.0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Event(Arc<EventInner>);

impl Event {
    /// A new, unrecorded event; `enable_timing` lets it be used with
    /// [`elapsed_time`](Event::elapsed_time).
    pub fn new(enable_timing: bool) -> Event {
        Event(Arc::new(EventInner {
            timing: enable_timing,
            mark: Mutex::new(None),
            time: Arc::new(Mutex::new(None)),
        }))
    }

    /// Record the event at the current end of `stream` (re-recording moves it).
    #[track_caller]
    pub fn record(&self, stream: &Stream) -> Result<()> {
        let b = backend(&stream.device)?;
        *self.0.time.lock() = None;
        let seq = if self.0.timing {
            let slot = Arc::clone(&self.0.time);
            b.host_fn(
                stream.id,
                "record_event",
                Location::caller(),
                Box::new(move || {
                    *slot.lock() = Some(Instant::now());
                    Ok(())
                }),
            )?
        } else {
            b.record_event(stream.id)
        };
        *self.0.mark.lock() = Some((stream.device, stream.id, seq));
        Ok(())
    }

    /// Make future work on `stream` wait until this event has completed.
    /// The stream may be on another device than the event (as
    /// `cudaStreamWaitEvent` allows); the host does not block, except
    /// when the waiting stream is the cpu's (which runs synchronously).
    #[track_caller]
    pub fn wait(&self, stream: &Stream) -> Result<()> {
        let Some((dev, sid, seq)) = *self.0.mark.lock() else {
            return Ok(()); // an unrecorded event is complete, as in CUDA
        };
        stream_wait_event(backend(&stream.device)?, stream.id, &dev, sid, seq)
    }

    /// Block the host until the event has completed; returns a fault raised
    /// on its stream.
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        let mark = *self.0.mark.lock();
        let _sync = match mark {
            Some((dev, ..)) => {
                crate::transfer::sync_scope("Event::synchronize", dev, Location::caller())?
            }
            None => None,
        };
        match mark {
            Some((dev, sid, seq)) => backend(&dev)?.event_synchronize(sid, seq),
            None => Ok(()),
        }
    }

    /// True when the event has completed (or was never recorded).
    pub fn query(&self) -> bool {
        match *self.0.mark.lock() {
            Some((dev, sid, seq)) => backend(&dev).is_ok_and(|b| b.event_query(sid, seq)),
            None => true,
        }
    }

    /// Milliseconds between this event and `end` (PyTorch's
    /// `start.elapsed_time(end)`): both created with timing
    /// (`Event::new(true)`), recorded on the same device, and completed;
    /// `end` must have completed after `self`.
    pub fn elapsed_time(&self, end: &Event) -> Result<f64> {
        let op = "elapsed_time";
        for (what, e) in [("start", self), ("end", end)] {
            if !e.0.timing {
                return Err(Error::invalid(
                    op,
                    format!("the {what} event was created without timing. Create both events with `Event::new(true)`."),
                ));
            }
        }
        // one lock at a time: `end` may be `self` (the lock is not reentrant)
        let start_mark = *self.0.mark.lock();
        let end_mark = *end.0.mark.lock();
        let (Some((sdev, ..)), Some((edev, ..))) = (start_mark, end_mark) else {
            let what = if start_mark.is_none() { "start" } else { "end" };
            return Err(Error::invalid(
                op,
                format!("the {what} event has not been recorded. Record both events on a stream (`event.record(&stream)?`) before asking for the time between them."),
            ));
        };
        if sdev != edev {
            return Err(Error::invalid(
                op,
                format!("the start event was recorded on {sdev} and the end event on {edev}; the time between events is only defined on one device. Record both on streams of the same device."),
            ));
        }
        let start_time = *self.0.time.lock();
        let end_time = *end.0.time.lock();
        let (Some(a), Some(b)) = (start_time, end_time) else {
            let what = if start_time.is_none() { "start" } else { "end" };
            return Err(Error::invalid(
                op,
                format!("the {what} event has not completed yet. Wait for it first (`end.synchronize()?`)."),
            ));
        };
        if b < a {
            return Err(Error::invalid(
                op,
                format!("the end event completed {:.3} ms before the start event, so the time between them would be negative. Record the start event before the end event (on one stream, or order the streams with `wait_event`).", (a - b).as_secs_f64() * 1e3),
            ));
        }
        Ok((b - a).as_secs_f64() * 1e3)
    }
}
