//! [`ProcessGroup`]: the collectives of PyTorch's `torch.distributed` on
//! tensors of every dtype and device, over a communication engine.
//!
//! Note [Staging]: a collective stages its tensor's elements in host
//! memory (for a device tensor that is a device-to-host copy, counted by
//! the transfer ledger like any other, after the tensor's pending work),
//! hands the buffer to the engine, which runs collectives one after
//! another in submission order on its own thread, and writes the result
//! back with `copy_` — the one in-place path, so version counters, the
//! in-place checks of autograd and the ledger see it. The write-back runs
//! when the [`Work`] is waited for (or dropped), on the thread that waits.

use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tensorguard::{Error, Result, Tensor};

use crate::engine::{Collective, Engine, Job, Single};
use crate::env;
use crate::nccl::{self as lane, Lane, Pending};
use crate::wire::{self, Buf};

/// How a reduction combines the ranks' values (PyTorch's `ReduceOp`): the
/// core's, which its NCCL collectives take too.
pub use tensorguard::nccl::ReduceOp;

/// Which communication engine a group runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// MPI when an MPI launcher started this process (and this build has
    /// the `mpi` feature); otherwise the world of one process.
    Auto,
    /// MPI (the `mpi` feature): processes on CPUs and emulated devices;
    /// cuda tensors are staged through host memory.
    Mpi,
    /// NCCL for cuda tensors (the `nccl` feature), on the GPU without
    /// staging; the ranks, and the collectives of cpu and emu tensors, come
    /// from MPI under an MPI launcher, else this is the world of one
    /// process (whose NCCL communicator has one rank). `Auto` picks NCCL
    /// for cuda tensors by itself when the build has the feature and the
    /// world has more than one process.
    Nccl,
    /// One process, no engine: every collective is the identity.
    Single,
}

/// How [`ProcessGroup::new`] sets a group up.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    /// The engine.
    pub backend: Backend,
    /// How long joining the group and each collective may take before the
    /// ranks that are missing are named in an error (PyTorch's `timeout`).
    /// `TENSORGUARD_DIST_TIMEOUT` (seconds) sets it for
    /// [`GroupOptions::default`]; otherwise 600 s.
    pub timeout: Duration,
    /// Before each collective, check that every rank is running the same
    /// one (kind, element count, dtype, root): a mismatch, which MPI would
    /// turn into a hang or garbage, becomes an error naming the ranks that
    /// differ. Costs one small all-gather per collective; on by default.
    pub verify: bool,
}

impl Default for GroupOptions {
    fn default() -> Self {
        let timeout = std::env::var("TENSORGUARD_DIST_TIMEOUT")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| *s > 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(Duration::from_secs(600));
        GroupOptions {
            backend: Backend::Auto,
            timeout,
            verify: true,
        }
    }
}

struct Inner {
    engine: Box<dyn Engine>,
    seq: AtomicU64,
    timeout: Duration,
    /// cuda tensors take the NCCL lane (Note [NCCL lane]).
    nccl: bool,
    lane: Lane,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.engine.shutdown();
    }
}

/// The process's MPI group while a handle to it lives (MPI is set up once
/// per process: every `new` with the MPI engine returns the same group).
static MPI_GROUP: Mutex<Option<Weak<Inner>>> = Mutex::new(None);

/// A group of processes that run collectives together (PyTorch's
/// `ProcessGroup`); cloning gives another handle to the same group.
///
/// Every collective writes its result in place (or returns new tensors,
/// for `all_gather` and `reduce_scatter`) on the input's device and dtype.
/// The `_async` forms return a [`Work`] at once while the engine runs the
/// collective on its own thread (PyTorch's `async_op=True`); every rank
/// must call the collectives in the same order.
///
/// ```
/// use tensorguard::{Device, Tensor};
/// use tensorguard_distributed::{ProcessGroup, ReduceOp};
/// # fn main() -> tensorguard::Result<()> {
/// // under `mpirun -np N` with the `mpi` feature this is the MPI world;
/// // started alone it is the world of one process
/// let pg = ProcessGroup::from_env()?;
/// let t = Tensor::full([4], (pg.rank() + 1) as f64, tensorguard::DType::F32, &Device::Cpu)?;
/// pg.all_reduce_(&t, ReduceOp::Sum)?;
/// let n = pg.world_size() as f32;
/// assert_eq!(t.to_vec::<f32>()?, vec![n * (n + 1.0) / 2.0; 4]);
/// let parts = pg.all_gather(&t)?;
/// assert_eq!(parts.len(), pg.world_size());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ProcessGroup {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ProcessGroup({}, rank {} of {})",
            self.backend_name(),
            self.rank(),
            self.world_size()
        )
    }
}

impl ProcessGroup {
    /// Join the group `opts` describes. With [`Backend::Mpi`] (or `Auto`
    /// under an MPI launcher) this initialises MPI on the engine's thread
    /// and fails, naming the timeout, when not every rank joins in time.
    pub fn new(opts: GroupOptions) -> Result<ProcessGroup> {
        const OP: &str = "ProcessGroup::new";
        if opts.backend == Backend::Nccl && !cfg!(feature = "nccl") {
            return Err(Error::Distributed {
                op: OP,
                rank: 0,
                world_size: 1,
                message: "this build of tensorguard-distributed has no NCCL lane. Build with `--features nccl` (NCCL's libnccl.so.2 is loaded at run time; the build needs neither NCCL nor a GPU), or use Backend::Mpi, which stages cuda tensors through host memory.".into(),
            });
        }
        let nccl = match opts.backend {
            Backend::Nccl => Some(true),
            Backend::Auto if cfg!(feature = "nccl") => None,
            _ => Some(false),
        };
        let backend = match opts.backend {
            Backend::Auto | Backend::Nccl if env::launched_by_mpi() => Backend::Mpi,
            Backend::Auto => {
                if let Some(n) = env::var_usize(OP, "WORLD_SIZE")?.filter(|n| *n > 1) {
                    return Err(Error::Distributed {
                        op: OP,
                        rank: 0,
                        world_size: 1,
                        message: format!(
                            "WORLD_SIZE={n} is set but no MPI launcher started this process, so it would train alone. tensorguard's groups run on MPI: launch with `mpirun -np {n} ...` (torchrun's TCP rendezvous is not used), or unset WORLD_SIZE."
                        ),
                    });
                }
                Backend::Single
            }
            b => b,
        };
        let group = match backend {
            Backend::Single | Backend::Nccl => ProcessGroup::single_with(nccl == Some(true)),
            _ => ProcessGroup::mpi(&opts, nccl)?,
        };
        env::check_against_env(OP, group.rank(), group.world_size())?;
        Ok(group)
    }

    /// [`new`](ProcessGroup::new) with [`GroupOptions::default`]: MPI
    /// under an MPI launcher, the world of one process otherwise.
    pub fn from_env() -> Result<ProcessGroup> {
        ProcessGroup::new(GroupOptions::default())
    }

    /// The world of one process (rank 0 of 1): collectives are identities.
    pub fn single() -> ProcessGroup {
        ProcessGroup::single_with(false)
    }

    fn single_with(nccl: bool) -> ProcessGroup {
        ProcessGroup {
            inner: Arc::new(Inner {
                engine: Box::new(Single),
                seq: AtomicU64::new(0),
                timeout: GroupOptions::default().timeout,
                nccl,
                lane: Lane::default(),
            }),
        }
    }

    #[cfg(feature = "mpi")]
    fn mpi(opts: &GroupOptions, nccl: Option<bool>) -> Result<ProcessGroup> {
        let mut live = MPI_GROUP.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(inner) = live.as_ref().and_then(Weak::upgrade) {
            return Ok(ProcessGroup { inner });
        }
        let engine =
            crate::mpi_engine::MpiEngine::start(opts.timeout, opts.verify, live.is_some())?;
        // Auto: NCCL for cuda tensors once there is more than one rank
        let nccl = nccl.unwrap_or(engine.world_size() > 1);
        let inner = Arc::new(Inner {
            engine: Box::new(engine),
            seq: AtomicU64::new(0),
            timeout: opts.timeout,
            nccl,
            lane: Lane::default(),
        });
        *live = Some(Arc::downgrade(&inner));
        Ok(ProcessGroup { inner })
    }

    #[cfg(not(feature = "mpi"))]
    fn mpi(_opts: &GroupOptions, _nccl: Option<bool>) -> Result<ProcessGroup> {
        let _ = &MPI_GROUP;
        Err(Error::Distributed {
            op: "ProcessGroup::new",
            rank: 0,
            world_size: 1,
            message: "this build of tensorguard-distributed has no MPI engine. Build with `--features mpi` (it needs an MPI implementation and libclang: `apt-get install mpich libmpich-dev libclang-dev` on Debian) and launch with `mpirun -np N`.".into(),
        })
    }

    /// This process's rank, `0..world_size`.
    pub fn rank(&self) -> usize {
        self.inner.engine.rank()
    }

    /// How many processes the group has.
    pub fn world_size(&self) -> usize {
        self.inner.engine.world_size()
    }

    /// This process's rank among the group's processes on its machine
    /// (which GPU to use: `cuda:{local_rank}`).
    pub fn local_rank(&self) -> usize {
        self.inner.engine.local_rank()
    }

    /// `"mpi"` or `"single"`.
    pub fn backend_name(&self) -> &'static str {
        self.inner.engine.name()
    }

    /// Whether collectives of cuda tensors run on NCCL (else they are
    /// staged through host memory and the engine).
    pub fn uses_nccl(&self) -> bool {
        self.inner.nccl
    }

    /// The timeout of each collective.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    pub(crate) fn error(&self, op: &'static str, message: String) -> Error {
        Error::Distributed {
            op,
            rank: self.rank(),
            world_size: self.world_size(),
            message,
        }
    }

    fn submit(
        &self,
        op: &'static str,
        what: Collective,
        data: Buf,
        desc: String,
    ) -> Receiver<Result<Buf>> {
        let (reply, rx) = mpsc::channel();
        if let Buf::Data(t) = &data {
            // the engine's thread uses it next
            t.share_with_threads();
        }
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        self.inner.engine.submit(Job {
            op,
            what,
            data,
            seq,
            desc,
            reply,
        });
        rx
    }

    fn describe(what: &str, t: &Tensor) -> String {
        format!(
            "{what} of {} {} ({})",
            t.numel(),
            t.dtype(),
            tensorguard::units::format_bytes((t.numel() * t.dtype().size_in_bytes()) as u64)
        )
    }

    /// Stage `t` for a reduction and submit it as `what` of the op MPI
    /// runs (a sum for `Avg`, which the caller divides; an or for bool).
    fn submit_reduction(
        &self,
        name: &'static str,
        t: &Tensor,
        op: ReduceOp,
        what: fn(ReduceOp) -> Collective,
    ) -> Result<Receiver<Result<Buf>>> {
        let wire = match wire::wire_op(name, t.dtype(), op)? {
            ReduceOp::Avg => ReduceOp::Sum,
            w => w,
        };
        let buf = wire::stage(t, true)?;
        Ok(self.submit(name, what(wire), buf, Self::describe(&op.to_string(), t)))
    }

    /// Reduce `t` over every rank, in place: afterwards every rank holds
    /// the same result (`torch.distributed.all_reduce`).
    #[track_caller]
    pub fn all_reduce_(&self, t: &Tensor, op: ReduceOp) -> Result<()> {
        self.all_reduce_async(t, op)?.wait().map(drop)
    }

    /// [`all_reduce_`](ProcessGroup::all_reduce_), returning at once; the
    /// result is in `t` once the [`Work`] is waited for.
    #[track_caller]
    pub fn all_reduce_async(&self, t: &Tensor, op: ReduceOp) -> Result<Work> {
        const OP: &str = "all_reduce_";
        let site = Location::caller();
        if lane::takes_lane(self.inner.nccl, t) {
            let p = self.inner.lane.run(self, OP, t, |c| {
                c.all_reduce_(t, op)?;
                Ok(vec![t.alias()])
            })?;
            return Ok(self.nccl_work(OP, site, p));
        }
        let rx = self.submit_reduction(OP, t, op, Collective::AllReduce)?;
        let n = self.world_size();
        let target = t.alias();
        Ok(self.work(OP, site, rx, move |buf| {
            if op == ReduceOp::Avg {
                buf.divide(n)?;
            }
            // copy_ casts a widened half reduction back on the way
            target.copy_(&wire::unstage(buf, target.shape())?)?;
            Ok(vec![target])
        }))
    }

    /// Copy `src`'s `t` into `t` on every rank, in place
    /// (`torch.distributed.broadcast`). Every rank's `t` must have the same
    /// shape and dtype.
    #[track_caller]
    pub fn broadcast_(&self, t: &Tensor, src: usize) -> Result<()> {
        self.broadcast_async(t, src)?.wait().map(drop)
    }

    /// [`broadcast_`](ProcessGroup::broadcast_), returning at once.
    #[track_caller]
    pub fn broadcast_async(&self, t: &Tensor, src: usize) -> Result<Work> {
        const OP: &str = "broadcast_";
        let site = Location::caller();
        if src >= self.world_size() {
            return Err(self.error(
                OP,
                format!(
                    "the source rank {src} is not in the group (ranks 0..{}). Pass a rank below the world size.",
                    self.world_size()
                ),
            ));
        }
        if lane::takes_lane(self.inner.nccl, t) {
            let p = self.inner.lane.run(self, OP, t, |c| {
                c.broadcast_(t, src)?;
                Ok(vec![t.alias()])
            })?;
            return Ok(self.nccl_work(OP, site, p));
        }
        let buf = wire::stage(t, false)?;
        let rx = self.submit(
            OP,
            Collective::Broadcast { root: src },
            buf,
            Self::describe(&format!("from rank {src}"), t),
        );
        let target = t.alias();
        Ok(self.work(OP, site, rx, move |buf| {
            // copy_ casts a widened half reduction back on the way
            target.copy_(&wire::unstage(buf, target.shape())?)?;
            Ok(vec![target])
        }))
    }

    /// Every rank's `t`, in rank order, on every rank
    /// (`torch.distributed.all_gather`): new tensors on `t`'s device.
    #[track_caller]
    pub fn all_gather(&self, t: &Tensor) -> Result<Vec<Tensor>> {
        self.all_gather_async(t)?.wait()
    }

    /// [`all_gather`](ProcessGroup::all_gather), returning at once.
    #[track_caller]
    pub fn all_gather_async(&self, t: &Tensor) -> Result<Work> {
        const OP: &str = "all_gather";
        let site = Location::caller();
        if lane::takes_lane(self.inner.nccl, t) {
            let p = self.inner.lane.run(self, OP, t, |c| {
                let all = c.all_gather(t)?;
                (0..c.world_size())
                    .map(|r| all.select(0, r as isize))
                    .collect()
            })?;
            return Ok(self.nccl_work(OP, site, p));
        }
        let buf = wire::stage(t, false)?;
        let rx = self.submit(OP, Collective::AllGather, buf, Self::describe("gather", t));
        let (shape, dtype, device, n) =
            (t.shape().to_vec(), t.dtype(), t.device(), self.world_size());
        Ok(self.work(OP, site, rx, move |buf| {
            let mut full = vec![n];
            full.extend_from_slice(&shape);
            let all = wire::unstage_to(buf, &full, dtype, &device)?;
            (0..n).map(|r| all.select(0, r as isize)).collect()
        }))
    }

    /// Reduce `t` over every rank and give rank r block r of the result
    /// along dimension 0 (`torch.distributed.reduce_scatter_tensor`): `t`'s
    /// first dimension must be a multiple of the world size.
    #[track_caller]
    pub fn reduce_scatter(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let mut out = self.reduce_scatter_async(t, op)?.wait()?;
        out.pop()
            .ok_or_else(|| self.error("reduce_scatter", "internal error: no output".into()))
    }

    /// [`reduce_scatter`](ProcessGroup::reduce_scatter), returning at once.
    #[track_caller]
    pub fn reduce_scatter_async(&self, t: &Tensor, op: ReduceOp) -> Result<Work> {
        const OP: &str = "reduce_scatter";
        let site = Location::caller();
        let n = self.world_size();
        let first = t.shape().first().copied().unwrap_or(0);
        if t.ndim() == 0 || first % n != 0 {
            return Err(self.error(
                OP,
                format!(
                    "the input of shape {:?} cannot be split into {n} equal blocks along dimension 0 (one per rank). Pad dimension 0 to a multiple of {n}.",
                    t.shape()
                ),
            ));
        }
        if lane::takes_lane(self.inner.nccl, t) {
            let p = self
                .inner
                .lane
                .run(self, OP, t, |c| Ok(vec![c.reduce_scatter(t, op)?]))?;
            return Ok(self.nccl_work(OP, site, p));
        }
        let rx = self.submit_reduction(OP, t, op, Collective::ReduceScatter)?;
        let mut shape = t.shape().to_vec();
        shape[0] /= n;
        let (dtype, device) = (t.dtype(), t.device());
        Ok(self.work(OP, site, rx, move |buf| {
            if op == ReduceOp::Avg {
                buf.divide(n)?;
            }
            Ok(vec![wire::unstage_to(buf, &shape, dtype, &device)?])
        }))
    }

    /// Wait until every rank has called `barrier`.
    #[track_caller]
    pub fn barrier(&self) -> Result<()> {
        self.barrier_async()?.wait().map(drop)
    }

    /// [`barrier`](ProcessGroup::barrier), returning at once.
    #[track_caller]
    pub fn barrier_async(&self) -> Result<Work> {
        let site = Location::caller();
        let rx = self.submit("barrier", Collective::Barrier, Buf::Empty, "barrier".into());
        Ok(self.work("barrier", site, rx, |_| Ok(Vec::new())))
    }

    fn work(
        &self,
        op: &'static str,
        site: &'static Location<'static>,
        rx: Receiver<Result<Buf>>,
        finish: impl FnOnce(Buf) -> Result<Vec<Tensor>> + Send + 'static,
    ) -> Work {
        Work {
            op,
            site,
            group: self.clone(),
            state: State::Engine {
                rx,
                ready: None,
                finish: Some(Box::new(finish)),
            },
        }
    }

    fn nccl_work(&self, op: &'static str, site: &'static Location<'static>, p: Pending) -> Work {
        Work {
            op,
            site,
            group: self.clone(),
            state: State::Nccl(Some(p)),
        }
    }
}

type Finish = Box<dyn FnOnce(Buf) -> Result<Vec<Tensor>> + Send>;

/// A collective in flight (PyTorch's `Work`): [`wait`](Work::wait) for its
/// result. Dropping it waits too (the result is written), logging an
/// error it could not return.
#[must_use = "a collective's result is written when its Work is waited for"]
pub struct Work {
    op: &'static str,
    site: &'static Location<'static>,
    group: ProcessGroup,
    state: State,
}

/// Where a collective runs: the engine's thread (answering on `rx`, the
/// result written by `finish`) or NCCL on the GPU.
enum State {
    Engine {
        rx: Receiver<Result<Buf>>,
        ready: Option<Result<Buf>>,
        finish: Option<Finish>,
    },
    Nccl(Option<Pending>),
}

impl Work {
    /// Whether the engine has finished the collective (the result is
    /// written by [`wait`](Work::wait), which then does not block).
    pub fn is_completed(&mut self) -> bool {
        match &mut self.state {
            State::Engine { rx, ready, finish } => {
                if ready.is_none() {
                    if let Ok(r) = rx.try_recv() {
                        *ready = Some(r);
                    }
                }
                ready.is_some() || finish.is_none()
            }
            State::Nccl(p) => p.as_ref().is_none_or(Pending::is_completed),
        }
    }

    /// Wait for the collective, write its result and return its output
    /// tensors (the input itself for the in-place ones, none for a
    /// barrier). A rank that died or never came is an error naming it
    /// after the group's timeout.
    pub fn wait(mut self) -> Result<Vec<Tensor>> {
        self.complete()
    }

    fn complete(&mut self) -> Result<Vec<Tensor>> {
        let (rx, ready, finish) = match &mut self.state {
            State::Engine { rx, ready, finish } => (rx, ready, finish),
            State::Nccl(p) => {
                return match p.take() {
                    Some(p) => p.wait(&self.group, self.op, self.site),
                    None => Ok(Vec::new()),
                }
            }
        };
        let Some(finish) = finish.take() else {
            return Ok(Vec::new());
        };
        let got = match ready.take() {
            Some(r) => r,
            // the engine answers every job within its timeout; the margin
            // covers the liveness check that follows a timeout
            None => match rx.recv_timeout(self.group.timeout() * 2 + Duration::from_secs(30)) {
                Ok(r) => r,
                Err(_) => Err(self.group.error(
                    self.op,
                    format!(
                        "the communication engine did not answer the collective started at {} (it stopped or is stuck). The group cannot be used any more.",
                        self.site
                    ),
                )),
            },
        };
        finish(got?)
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if let Err(e) = self.complete() {
            log::error!(
                "{} started at {} (its Work was dropped without wait): {e}",
                self.op,
                self.site
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorguard::Device;

    #[test]
    fn the_world_of_one_process_runs_every_collective_as_the_identity() -> Result<()> {
        let pg = ProcessGroup::single();
        assert_eq!(
            (
                pg.rank(),
                pg.world_size(),
                pg.local_rank(),
                pg.backend_name()
            ),
            (0, 1, 0, "single")
        );
        for dev in [Device::Cpu, Device::Emulated(0)] {
            let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4], &dev)?;
            for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
                pg.all_reduce_(&t, op)?;
            }
            pg.broadcast_(&t, 0)?;
            assert_eq!(t.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
            let parts = pg.all_gather(&t)?;
            assert_eq!((parts.len(), parts[0].device()), (1, dev));
            let rs = pg.reduce_scatter(&t, ReduceOp::Sum)?;
            assert_eq!(rs.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
            let mut w = pg.barrier_async()?;
            assert!(w.is_completed());
            assert!(w.wait()?.is_empty());
            let e = pg.broadcast_(&t, 1).unwrap_err().to_string();
            assert!(
                e.contains("rank 0 of 1") && e.contains("source rank 1"),
                "{e}"
            );
        }
        Ok(())
    }

    #[test]
    fn the_nccl_backend_needs_its_feature_and_leaves_host_tensors_to_the_engine() -> Result<()> {
        if crate::launched_by_mpi() {
            return Ok(());
        }
        let opts = GroupOptions {
            backend: Backend::Nccl,
            ..Default::default()
        };
        if cfg!(feature = "nccl") {
            let pg = ProcessGroup::new(opts)?;
            assert!(pg.uses_nccl() && pg.world_size() == 1);
            // cpu and emu tensors never take the NCCL lane
            for dev in [Device::Cpu, Device::Emulated(0)] {
                let t = Tensor::from_vec(vec![1.0f32, 2.0], [2], &dev)?;
                pg.all_reduce_(&t, ReduceOp::Avg)?;
                assert_eq!(t.to_vec::<f32>()?, vec![1.0, 2.0]);
            }
        } else {
            let e = ProcessGroup::new(opts).unwrap_err().to_string();
            assert!(
                e.contains("--features nccl") && e.contains("Backend::Mpi"),
                "{e}"
            );
        }
        assert!(
            !ProcessGroup::from_env()?.uses_nccl(),
            "a world of one has no NCCL lane by default"
        );
        Ok(())
    }

    #[test]
    fn world_size_without_a_launcher_is_an_error_and_the_mpi_backend_needs_the_feature() {
        if crate::launched_by_mpi() {
            return;
        }
        std::env::set_var("WORLD_SIZE", "4");
        let e = ProcessGroup::from_env().unwrap_err().to_string();
        std::env::remove_var("WORLD_SIZE");
        assert!(
            e.contains("WORLD_SIZE=4") && e.contains("mpirun -np 4"),
            "{e}"
        );
        #[cfg(not(feature = "mpi"))]
        {
            let e = ProcessGroup::new(GroupOptions {
                backend: Backend::Mpi,
                ..Default::default()
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains("--features mpi"), "{e}");
        }
    }
}
