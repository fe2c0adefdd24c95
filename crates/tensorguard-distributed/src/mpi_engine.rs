//! The MPI engine: one thread per process owns MPI (initialised there,
//! with `MPI_THREAD_SERIALIZED`, so no other thread ever calls it) and runs
//! the group's jobs in submission order as non-blocking collectives, which
//! it polls — so that a collective that does not finish within the
//! group's timeout becomes an error instead of a hang.
//!
//! Note [Liveness check]: while idle or polling, the engine thread answers
//! small point-to-point "ping" messages (tag [`PING`]) from the other
//! ranks. When a collective times out, the engine pings every other rank
//! and waits up to two seconds: a rank that does not answer has died (or
//! hangs inside MPI); if every rank answers, they are alive but have not
//! reached this collective (the ranks called collectives in different
//! orders, or one is busy outside the group). Either way the error names
//! them, and the group refuses every later collective: MPI cannot cancel a
//! collective, so the timed-out one stays posted (its buffers owned by the
//! stuck engine thread) until it completes or the process exits.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::request::{Request, Scope, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Threading;

use bytemuck::Pod;
use tensorguard::autograd::HostElement;
use tensorguard::{DType, Error, Result, Tensor};

use crate::engine::{describe_code, Collective, Engine, Job};
use crate::env;
use crate::wire::{self, Buf};
use crate::ReduceOp;

/// The tag of a liveness ping (Note [Liveness check]).
const PING: i32 = 0x7467;
/// The tag of its answer.
const PONG: i32 = 0x7468;
const OP_INIT: &str = "ProcessGroup::new";

enum Msg {
    Job(Job),
    Shutdown,
}

/// The MPI engine's handle (the engine itself lives on its thread).
pub(crate) struct MpiEngine {
    tx: Sender<Msg>,
    rank: usize,
    size: usize,
    local: usize,
    broken: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl MpiEngine {
    /// Start the engine thread, initialise MPI there and wait (up to
    /// `timeout`) until every rank of the job has joined.
    pub(crate) fn start(
        timeout: Duration,
        verify: bool,
        started_before: bool,
    ) -> Result<MpiEngine> {
        if started_before {
            return Err(Error::Distributed {
                op: OP_INIT,
                rank: 0,
                world_size: 1,
                message: "MPI was started and shut down already in this process (every handle to the group was dropped), and MPI cannot start twice. Keep one ProcessGroup alive for the whole run.".into(),
            });
        }
        let (tx, rx) = mpsc::channel();
        let (init_tx, init_rx) = mpsc::channel();
        let broken = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&broken);
        let thread = std::thread::Builder::new()
            .name("tensorguard-mpi".into())
            .spawn(move || engine_thread(rx, init_tx, timeout, verify, flag))
            .map_err(|e| Error::Distributed {
                op: OP_INIT,
                rank: 0,
                world_size: 1,
                message: format!("could not start the MPI engine's thread ({e})."),
            })?;
        let (rank, size, local) = match init_rx.recv_timeout(timeout) {
            Ok(r) => r?,
            Err(_) => {
                let rank = env::var_usize(OP_INIT, "PMI_RANK")
                    .ok()
                    .flatten()
                    .unwrap_or(0);
                let size = env::var_usize(OP_INIT, "PMI_SIZE")
                    .ok()
                    .flatten()
                    .unwrap_or(1);
                return Err(Error::Distributed {
                    op: OP_INIT,
                    rank,
                    world_size: size,
                    message: format!(
                        "MPI's initialisation did not finish within {:.1} s: not every rank of the job joined (one failed to start, crashed before joining, or was not started by the same mpirun). Check the other ranks' output; raise the timeout with GroupOptions::timeout or TENSORGUARD_DIST_TIMEOUT if they start slowly.",
                        timeout.as_secs_f64()
                    ),
                });
            }
        };
        Ok(MpiEngine {
            tx,
            rank,
            size,
            local,
            broken,
            thread: Mutex::new(Some(thread)),
        })
    }
}

impl Engine for MpiEngine {
    fn name(&self) -> &'static str {
        "mpi"
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.size
    }
    fn local_rank(&self) -> usize {
        self.local
    }
    fn submit(&self, job: Job) {
        if let Err(mpsc::SendError(Msg::Job(job))) = self.tx.send(Msg::Job(job)) {
            let _ = job.reply.send(Err(Error::Distributed {
                op: job.op,
                rank: self.rank,
                world_size: self.size,
                message: "the MPI engine has stopped; the group cannot run collectives any more."
                    .into(),
            }));
        }
    }
    fn shutdown(&self) {
        let _ = self.tx.send(Msg::Shutdown);
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        // a broken engine may be stuck on a collective that never
        // completes: the process's exit ends it (without MPI_Finalize)
        if let (Some(h), false) = (handle, self.broken.load(Ordering::SeqCst)) {
            let _ = h.join();
        }
    }
}

type InitReply = Result<(usize, usize, usize)>;

fn engine_thread(
    rx: Receiver<Msg>,
    init: Sender<InitReply>,
    timeout: Duration,
    verify: bool,
    broken: Arc<AtomicBool>,
) {
    let Some((universe, _level)) = mpi::initialize_with_threading(Threading::Serialized) else {
        let _ = init.send(Err(Error::Distributed {
            op: OP_INIT,
            rank: 0,
            world_size: 1,
            message: "MPI is initialised already in this process by other code; tensorguard's engine must own MPI. Create the ProcessGroup before anything else uses MPI.".into(),
        }));
        return;
    };
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    // collective over the world: every rank splits, whatever its env says
    let shared = world.split_shared(world.rank()).rank() as usize;
    let local = match env::local_rank_from_env(OP_INIT) {
        Ok(r) => r.unwrap_or(shared),
        Err(e) => {
            let _ = init.send(Err(e));
            return;
        }
    };
    let _ = init.send(Ok((rank, size, local)));
    let mut engine = Thread {
        world,
        rank,
        size,
        timeout,
        verify,
        broken,
        broken_by: None,
        rx,
        ping_id: 0,
        shutdown: false,
    };
    while !engine.shutdown {
        match engine.rx.recv_timeout(Duration::from_millis(2)) {
            Ok(Msg::Job(job)) => engine.run(job),
            Ok(Msg::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => engine.serve_pings(),
        }
    }
    // MPI_Finalize (when every collective completed)
    drop(engine);
    drop(universe);
}

/// The engine thread's state.
struct Thread {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    timeout: Duration,
    verify: bool,
    broken: Arc<AtomicBool>,
    /// Why the group is broken: the collective that timed out.
    broken_by: Option<String>,
    rx: Receiver<Msg>,
    ping_id: u64,
    shutdown: bool,
}

/// Staged elements as the wire's type of the same bits (`f16` as `u16`).
fn wire_ref<E: Pod, W: Pod>(d: &[E]) -> Result<&[W]> {
    bytemuck::try_cast_slice(d).map_err(cast_error)
}

/// [`wire_ref`], writable.
fn wire_mut<E: Pod, W: Pod>(d: &mut [E]) -> Result<&mut [W]> {
    bytemuck::try_cast_slice_mut(d).map_err(cast_error)
}

fn cast_error(e: bytemuck::PodCastError) -> Error {
    Error::InvalidArgument {
        op: "ProcessGroup",
        message: format!(
            "internal error: a staging buffer cannot be viewed as the wire's element type ({e})."
        ),
    }
}

fn sys_op(op: ReduceOp) -> SystemOperation {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => SystemOperation::sum(),
        ReduceOp::Max => SystemOperation::max(),
        ReduceOp::Min => SystemOperation::min(),
    }
}

impl Thread {
    fn error(&self, op: &'static str, message: String) -> Error {
        Error::Distributed {
            op,
            rank: self.rank,
            world_size: self.size,
            message,
        }
    }

    fn refuse(&self, job: Job) {
        let why = self.broken_by.clone().unwrap_or_default();
        let _ = job.reply.send(Err(self.error(
            job.op,
            format!("the group is broken since {why}; collective #{} ({}) was not run. Restart the job.", job.seq, job.desc),
        )));
    }

    fn run(&mut self, mut job: Job) {
        if self.broken_by.is_some() {
            return self.refuse(job);
        }
        let data = std::mem::replace(&mut job.data, Buf::Empty);
        let result = self
            .check(&job, &data)
            .and_then(|()| self.collective(&job, data));
        if let Ok(Buf::Data(t)) = &result {
            // the waiting thread writes it back
            t.share_with_threads();
        }
        let _ = job.reply.send(result);
    }

    /// Every rank must be running the same collective (GroupOptions::verify).
    fn check(&mut self, job: &Job, data: &Buf) -> Result<()> {
        if !self.verify || self.size == 1 {
            return Ok(());
        }
        let mine = [
            job.seq as i64,
            job.what.code(),
            data.len() as i64,
            data.code(),
        ];
        let mut all = vec![0i64; 4 * self.size];
        mpi::request::scope(|scope| {
            let req = self
                .world
                .immediate_all_gather_into(scope, &mine[..], &mut all[..]);
            self.poll(req, job)
        })?;
        let differ: Vec<String> = all
            .chunks(4)
            .enumerate()
            .filter(|(_, d)| *d != mine)
            .map(|(r, d)| {
                format!(
                    "rank {r} runs collective #{} ({})",
                    d[0],
                    describe_code(d[1], d[2], d[3])
                )
            })
            .collect();
        if differ.is_empty() {
            return Ok(());
        }
        Err(self.error(
            job.op,
            format!(
                "the ranks are not running the same collective: this rank runs #{} ({}) but {}. Every rank must call the same collectives, on tensors of the same shape and dtype, in the same order.",
                job.seq,
                describe_code(mine[1], mine[2], mine[3]),
                differ.join(", ")
            ),
        ))
    }

    fn collective(&mut self, job: &Job, data: Buf) -> Result<Buf> {
        let t = match data {
            Buf::Data(t) => t,
            Buf::Empty => {
                if job.what == Collective::Barrier {
                    let req = self.world.immediate_barrier();
                    self.poll(req, job)?;
                }
                return Ok(Buf::Empty);
            }
        };
        match t.dtype() {
            DType::F32 => self.typed::<f32, f32>(job, t),
            DType::F64 => self.typed::<f64, f64>(job, t),
            DType::I32 => self.typed::<i32, i32>(job, t),
            DType::I64 => self.typed::<i64, i64>(job, t),
            DType::U8 | DType::Bool => self.typed::<u8, u8>(job, t),
            DType::F16 => self.typed::<half::f16, u16>(job, t),
            DType::BF16 => self.typed::<half::bf16, u16>(job, t),
        }
    }

    /// Run `job` on the staged `data`, its elements `E` lent to MPI as
    /// `W`s (the same bits): in place for a broadcast, into a new staging
    /// buffer otherwise (Note [Staging buffers]).
    fn typed<E: HostElement, W: Equivalence + Pod>(
        &mut self,
        job: &Job,
        data: Tensor,
    ) -> Result<Buf> {
        let n = self.size;
        let len = data.numel();
        let out_len = match job.what {
            Collective::AllReduce(_) => len,
            Collective::AllGather => len * n,
            Collective::ReduceScatter(_) if !len.is_multiple_of(n) => {
                return Err(self.error(
                    job.op,
                    format!("{len} elements cannot be split into {n} equal blocks."),
                ));
            }
            Collective::ReduceScatter(_) => len / n,
            Collective::Broadcast { root } => {
                data.with_host_data_mut(|d: &mut [E]| {
                    let d = wire_mut::<E, W>(d)?;
                    mpi::request::scope(|scope| {
                        let req = self
                            .world
                            .process_at_rank(root as i32)
                            .immediate_broadcast_into(scope, d);
                        self.poll(req, job)
                    })
                })??;
                return Ok(Buf::Data(data));
            }
            Collective::Barrier => return Ok(Buf::Data(data)),
        };
        let out = wire::buffer(out_len, data.dtype())?;
        data.with_host_data(|d: &[E]| {
            out.with_host_data_mut(|o: &mut [E]| {
                let (d, o) = (wire_ref::<E, W>(d)?, wire_mut::<E, W>(o)?);
                mpi::request::scope(|scope| {
                    let req = match job.what {
                        Collective::AllReduce(op) => {
                            self.world
                                .immediate_all_reduce_into(scope, d, o, sys_op(op))
                        }
                        Collective::ReduceScatter(op) => self
                            .world
                            .immediate_reduce_scatter_block_into(scope, d, o, sys_op(op)),
                        _ => self.world.immediate_all_gather_into(scope, d, o),
                    };
                    self.poll(req, job)
                })
            })
        })???;
        Ok(Buf::Data(out))
    }

    /// Poll `req` until it completes. Past the timeout: answer the job with
    /// the error of Note [Liveness check], then keep the request (MPI cannot
    /// cancel it) polled while refusing every later job.
    fn poll<'a, D: ?Sized, S: Scope<'a>>(
        &mut self,
        mut req: Request<'a, D, S>,
        job: &Job,
    ) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            match req.test() {
                Ok(_) => return Ok(()),
                Err(r) => req = r,
            }
            spins += 1;
            // the clock and the ping probe cost more than a test: not
            // every turn
            if !spins.is_multiple_of(64) {
                continue;
            }
            if start.elapsed() > self.timeout {
                break;
            }
            self.serve_pings();
            // MPI progresses only inside its calls: a large collective
            // is many chunks, each needing a test, so polling stays hot
            // (yielding the core) for a second, then backs off for ranks
            // that are late
            if spins > 64 * 256 {
                if start.elapsed() > Duration::from_secs(1) {
                    std::thread::sleep(Duration::from_micros(50));
                } else {
                    std::thread::yield_now();
                }
            }
        }
        let err = self.timeout_error(job);
        self.broken_by = Some(format!("collective #{} ({}) timed out", job.seq, job.desc));
        self.broken.store(true, Ordering::SeqCst);
        let _ = job.reply.send(Err(err));
        loop {
            match req.test() {
                Ok(_) => break,
                Err(r) => req = r,
            }
            self.serve_pings();
            match self.rx.recv_timeout(Duration::from_millis(5)) {
                Ok(Msg::Job(j)) => self.refuse(j),
                Ok(Msg::Shutdown) | Err(RecvTimeoutError::Disconnected) => self.shutdown = true,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        // the job was answered already: the caller's reply finds no receiver
        Err(self.error(job.op, "timed out".into()))
    }

    /// Answer the pings that arrived (Note [Liveness check]).
    fn serve_pings(&mut self) {
        while let Some(m) = self
            .world
            .any_process()
            .immediate_matched_probe_with_tag(PING)
        {
            let (v, status) = m.matched_receive_vec::<u64>();
            let answer = [v.first().copied().unwrap_or(0), self.rank as u64];
            self.world
                .process_at_rank(status.source_rank())
                .send_with_tag(&answer[..], PONG);
        }
    }

    /// The ranks that do not answer a ping within two seconds.
    fn silent_ranks(&mut self) -> Vec<usize> {
        self.ping_id += 1;
        let id = self.ping_id;
        let mut sends = Vec::new();
        for p in (0..self.size).filter(|p| *p != self.rank) {
            // 16 bytes a rank, kept for the process: a send to a dead rank
            // may never complete, and a posted send's buffer must live
            let buf: &'static [u64] = Box::leak(Box::new([id, self.rank as u64]));
            sends.push(
                self.world
                    .process_at_rank(p as i32)
                    .immediate_send_with_tag(StaticScope, buf, PING),
            );
        }
        let mut answered = BTreeSet::new();
        let deadline = Instant::now()
            + Duration::from_secs(2).min(self.timeout.max(Duration::from_millis(200)));
        while answered.len() + 1 < self.size && Instant::now() < deadline {
            self.serve_pings();
            while let Some(m) = self
                .world
                .any_process()
                .immediate_matched_probe_with_tag(PONG)
            {
                let (v, _) = m.matched_receive_vec::<u64>();
                if v.first() == Some(&id) {
                    if let Some(r) = v.get(1) {
                        answered.insert(*r as usize);
                    }
                }
            }
            sends = sends.into_iter().filter_map(|r| r.test().err()).collect();
            std::thread::sleep(Duration::from_millis(1));
        }
        // sends to ranks that never received them stay posted
        sends.into_iter().for_each(std::mem::forget);
        (0..self.size)
            .filter(|p| *p != self.rank && !answered.contains(p))
            .collect()
    }

    fn timeout_error(&mut self, job: &Job) -> Error {
        let silent = self.silent_ranks();
        let who = if silent.is_empty() {
            "every other rank answered a liveness check, so they are alive but have not reached this collective: a rank skipped it or called the collectives in another order, or is busy outside the group for longer than the timeout".to_string()
        } else {
            let names: Vec<String> = silent.iter().map(|r| format!("rank {r}")).collect();
            format!(
                "{} did not answer a liveness check within 2 s: {} died, hung inside MPI or never reached the group",
                names.join(", "),
                if silent.len() == 1 { "it" } else { "they" }
            )
        };
        self.error(
            job.op,
            format!(
                "collective #{} ({}) did not complete within {:.1} s; {who}. The group cannot be used any more (MPI cannot cancel a collective): stop this process, check the other ranks' output and restart the job; raise the timeout with GroupOptions::timeout or TENSORGUARD_DIST_TIMEOUT if the ranks are merely slow.",
                job.seq,
                job.desc,
                self.timeout.as_secs_f64()
            ),
        )
    }
}
