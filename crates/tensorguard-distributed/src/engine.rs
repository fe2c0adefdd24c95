//! The seam between a [`ProcessGroup`](crate::ProcessGroup) and the
//! communication engine under it: a job is one collective over a staged
//! host buffer, answered on its own channel. The engine runs jobs in the
//! order they were submitted — every rank submits its collectives in the
//! same order, which is what makes them match (as in PyTorch).

use std::sync::mpsc::Sender;

use tensorguard::Result;

use crate::wire::Buf;
use crate::ReduceOp;

/// The collective a job runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Collective {
    /// Every rank gets the reduction of every rank's buffer (`Avg` comes
    /// here as `Sum`; the group divides).
    AllReduce(ReduceOp),
    /// Every rank gets `root`'s buffer.
    Broadcast { root: usize },
    /// Every rank gets the concatenation of every rank's buffer, in rank
    /// order.
    AllGather,
    /// Rank r gets block r of the reduction (the buffer's length is a
    /// multiple of the world size).
    ReduceScatter(ReduceOp),
    /// Every rank waits until all have arrived.
    Barrier,
}

impl Collective {
    /// A code for the descriptor check (ranks must agree on it).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn code(&self) -> i64 {
        let op = |o: &ReduceOp| match o {
            ReduceOp::Sum => 0,
            ReduceOp::Avg => 1,
            ReduceOp::Max => 2,
            ReduceOp::Min => 3,
        };
        match self {
            Collective::AllReduce(o) => 10 + op(o),
            Collective::Broadcast { root } => 100 + *root as i64,
            Collective::AllGather => 20,
            Collective::ReduceScatter(o) => 30 + op(o),
            Collective::Barrier => 40,
        }
    }
}

/// One collective, ready for the engine.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) struct Job {
    /// The public call (`all_reduce_`, ...), for errors.
    pub(crate) op: &'static str,
    pub(crate) what: Collective,
    pub(crate) data: Buf,
    /// The job's number in this group (the same on every rank).
    pub(crate) seq: u64,
    /// `sum of 1024 f32 (4.0 KiB)`, for errors.
    pub(crate) desc: String,
    pub(crate) reply: Sender<Result<Buf>>,
}

/// A communication engine.
pub(crate) trait Engine: Send + Sync {
    fn name(&self) -> &'static str;
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    fn local_rank(&self) -> usize;
    /// Queue `job`; the engine answers on `job.reply`.
    fn submit(&self, job: Job);
    /// Stop the engine (after the queued jobs); called once, when the last
    /// handle to the group is dropped.
    fn shutdown(&self) {}
}

/// The world of one process: every collective is the identity.
pub(crate) struct Single;

impl Engine for Single {
    fn name(&self) -> &'static str {
        "single"
    }
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn local_rank(&self) -> usize {
        0
    }
    fn submit(&self, job: Job) {
        let out = match job.what {
            Collective::Barrier => Buf::Empty,
            _ => job.data,
        };
        // the receiver may be gone (a dropped Work): nothing to tell it
        let _ = job.reply.send(Ok(out));
    }
}

/// A collective's descriptor (from [`Collective::code`] and the wire
/// buffer) in words, for the descriptor check's error.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn describe_code(code: i64, len: i64, elem: i64) -> String {
    let op = |o: i64| {
        ["sum", "avg", "max", "min"]
            .get(o as usize)
            .copied()
            .unwrap_or("?")
    };
    let what = match code {
        10..=13 => format!("all_reduce_ {}", op(code - 10)),
        20 => "all_gather".to_string(),
        30..=33 => format!("reduce_scatter {}", op(code - 30)),
        40 => "barrier".to_string(),
        c if c >= 100 => format!("broadcast_ from rank {}", c - 100),
        c => format!("collective {c}"),
    };
    let elem = ["nothing", "f32", "f64", "i32", "i64", "u8", "u16"]
        .get(elem as usize)
        .copied()
        .unwrap_or("?");
    if code == 40 {
        what
    } else {
        format!("{what} of {len} {elem} on the wire")
    }
}
