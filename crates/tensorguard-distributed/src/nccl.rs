//! The NCCL lane of a group: collectives of `cuda:N` tensors run on NCCL,
//! on the GPU, without staging through host memory.
//!
//! Note [NCCL lane]: the communicator is made at the first collective of a
//! cuda tensor (every rank reaches it at the same point: collectives run
//! in the same order everywhere). Rank 0 makes the NCCL id and broadcasts
//! it over the group's own engine (MPI, or nothing for a world of one),
//! then every rank joins on its GPU. Each collective runs on the lane's
//! side stream, which first waits for the current stream (the work that
//! produced the input), so the rest of backward goes on while gradients
//! are reduced. Its [`Work`](crate::Work) records an event after it;
//! waiting for the Work polls that event and NCCL's own fault state until
//! the group's timeout, aborts the communicator when the time is up (a
//! rank died or never came: the collective would wait forever), and
//! finally makes the current stream wait for the event, so what follows
//! reads the result. One process drives one GPU (NCCL refuses two ranks on
//! one device).

use std::panic::Location;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tensorguard::device::{Event, Stream};
use tensorguard::nccl::{NcclComm, NcclId};
use tensorguard::{Device, Result, Tensor};

use crate::ProcessGroup;

/// The lane's communicator and side stream, made at first use.
#[derive(Default)]
pub(crate) struct Lane {
    state: Mutex<Option<(NcclComm, Stream)>>,
}

/// A collective queued on NCCL, waited for by [`Pending::wait`].
pub(crate) struct Pending {
    comm: NcclComm,
    event: Event,
    outs: Vec<Tensor>,
}

impl Lane {
    /// The communicator and stream for `device`, joining at first use
    /// (Note [NCCL lane]).
    fn get(
        &self,
        group: &ProcessGroup,
        op: &'static str,
        device: Device,
    ) -> Result<(NcclComm, Stream)> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((comm, stream)) = state.as_ref() {
            if comm.device() != device {
                return Err(group.error(
                    op,
                    format!(
                        "this rank's NCCL communicator is on {}, but the tensor is on {device}. NCCL drives one GPU per process: move the tensor to {} (each rank uses cuda:{{local_rank}}).",
                        comm.device(),
                        comm.device()
                    ),
                ));
            }
            return Ok((comm.clone(), *stream));
        }
        // rank 0's id, to every rank over the group's own engine
        let id = if group.rank() == 0 {
            NcclId::new()
                .map_err(|e| group.error(op, format!("rank 0 could not make an NCCL id: {e}")))?
        } else {
            NcclId::from_bytes(&[0; 128])?
        };
        let bytes = Tensor::from_vec(id.as_bytes().to_vec(), [128], &Device::Cpu)?;
        group.broadcast_(&bytes, 0)?;
        let id = NcclId::from_bytes(&bytes.to_vec::<u8>()?)?;
        let comm = NcclComm::new(&device, &id, group.rank(), group.world_size()).map_err(|e| {
            group.error(
                op,
                format!("joining the NCCL communicator on {device} failed: {e}"),
            )
        })?;
        let stream = Stream::new(&device)?;
        *state = Some((comm.clone(), stream));
        Ok((comm, stream))
    }

    /// Run `f` on the communicator of `t`'s GPU, on the side stream after
    /// the current stream's work.
    pub(crate) fn run(
        &self,
        group: &ProcessGroup,
        op: &'static str,
        t: &Tensor,
        f: impl FnOnce(&NcclComm) -> Result<Vec<Tensor>>,
    ) -> Result<Pending> {
        let device = t.device();
        let (comm, side) = self.get(group, op, device)?;
        side.wait_stream(&Stream::current(&device))?;
        let outs = {
            let _on = side.make_current();
            f(&comm)?
        };
        let event = Event::new(false);
        event.record(&side)?;
        Ok(Pending { comm, event, outs })
    }
}

impl Pending {
    /// Whether the collective has completed on the GPU.
    pub(crate) fn is_completed(&self) -> bool {
        self.event.query()
    }

    /// Wait for the collective (Note [NCCL lane]): its outputs, or the
    /// error after a fault or the timeout.
    pub(crate) fn wait(
        self,
        group: &ProcessGroup,
        op: &'static str,
        site: &'static Location<'static>,
    ) -> Result<Vec<Tensor>> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(20);
        while !self.event.query() {
            if let Err(e) = self.comm.check() {
                self.comm.abort();
                return Err(group.error(
                    op,
                    format!("the NCCL collective started at {site} failed: {e}"),
                ));
            }
            if start.elapsed() > group.timeout() {
                self.comm.abort();
                return Err(group.error(
                    op,
                    format!(
                        "the NCCL collective started at {site} did not complete within the group's timeout of {:?}: another rank died, never called it, or called a different one (NCCL does not say which; run with NCCL_DEBUG=INFO). The communicator was aborted and the group cannot run NCCL collectives any more.",
                        group.timeout()
                    ),
                ));
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(2));
        }
        // a fault of the collective itself surfaces here
        self.event.synchronize()?;
        if let Some(first) = self.outs.first() {
            self.event.wait(&Stream::current(&first.device()))?;
        }
        Ok(self.outs)
    }
}

/// Whether `t`'s collectives take the NCCL lane of a group with `on`.
pub(crate) fn takes_lane(on: bool, t: &Tensor) -> bool {
    on && matches!(t.device(), Device::Cuda(_))
}
