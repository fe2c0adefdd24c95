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

use super::backend::backend;
use super::{Device, StreamId};
use crate::error::{Error, Result};

thread_local! {
    static CURRENT: RefCell<Vec<(Device, StreamId)>> = const { RefCell::new(Vec::new()) };
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
            .find(|(d, _)| d == device)
            .map_or(0, |e| e.1)
    })
}

fn set_current(device: Device, id: StreamId) -> StreamId {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        match c.iter_mut().find(|(d, _)| *d == device) {
            Some(e) => std::mem::replace(&mut e.1, id),
            None => {
                c.push((device, id));
                0
            }
        }
    })
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
    pub fn make_current(&self) -> StreamGuard {
        let prev = set_current(self.device, self.id);
        StreamGuard {
            device: self.device,
            prev,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Make future work on `self` wait until the work queued on `other` so
    /// far has completed. The host does not block.
    #[track_caller]
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        self.same_device("wait_stream", other)?;
        let b = backend(&self.device)?;
        b.stream_wait(self.id, other.id, b.submitted(other.id))
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
        b.wait(self.id, b.submitted(self.id))
    }

    /// True when everything queued on this stream has completed.
    pub fn query(&self) -> bool {
        backend(&self.device).is_ok_and(|b| b.completed(self.id) >= b.submitted(self.id))
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

/// Restores the previous current stream when dropped. The current stream
/// is per thread, so the guard cannot be sent to another thread.
#[must_use = "the stream stays current only while the guard lives"]
pub struct StreamGuard {
    device: Device,
    prev: StreamId,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        set_current(self.device, self.prev);
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
            b.submitted(stream.id)
        };
        *self.0.mark.lock() = Some((stream.device, stream.id, seq));
        Ok(())
    }

    /// Make future work on `stream` wait until this event has completed.
    #[track_caller]
    pub fn wait(&self, stream: &Stream) -> Result<()> {
        let Some((dev, sid, seq)) = *self.0.mark.lock() else {
            return Ok(()); // an unrecorded event is complete, as in CUDA
        };
        if dev != stream.device {
            return Err(Error::DeviceMismatch {
                op: "Event::wait",
                arg: "stream",
                expected: dev,
                found: stream.device,
                location: Location::caller(),
            });
        }
        backend(&dev)?.stream_wait(stream.id, sid, seq)
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
            Some((dev, sid, seq)) => backend(&dev)?.wait(sid, seq),
            None => Ok(()),
        }
    }

    /// True when the event has completed (or was never recorded).
    pub fn query(&self) -> bool {
        match *self.0.mark.lock() {
            Some((dev, sid, seq)) => backend(&dev).is_ok_and(|b| b.completed(sid) >= seq),
            None => true,
        }
    }

    /// Milliseconds between this event and `end`, both recorded with timing
    /// and completed.
    pub fn elapsed_time(&self, end: &Event) -> Result<f64> {
        let not_ready = |what: &str| {
            Error::invalid(
                "elapsed_time",
                format!("the {what} event has no time: create both events with `Event::new(true)`, record them, and synchronize the end event first."),
            )
        };
        // one lock at a time: `end` may be `self` (the lock is not reentrant)
        let start_time = *self.0.time.lock();
        let end_time = *end.0.time.lock();
        let (Some(a), Some(b)) = (start_time, end_time) else {
            return Err(not_ready(if start_time.is_none() {
                "start"
            } else {
                "end"
            }));
        };
        let ms = if b >= a {
            (b - a).as_secs_f64() * 1e3
        } else {
            -((a - b).as_secs_f64() * 1e3)
        };
        Ok(ms)
    }
}
