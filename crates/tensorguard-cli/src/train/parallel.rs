//! `tensorguard train` across processes: the MPI group it joins under
//! `mpirun -np N` (or with `--distributed`), the model wrapped in
//! `DistributedDataParallel`, and the shard each rank reads.

use tensorguard::{Device, Tensor};
use tensorguard_distributed::{
    launched_by_mpi, Backend, DdpOptions, DistributedDataParallel, GroupOptions, ProcessGroup,
    ReduceOp,
};
use tensorguard_nn::data::DistributedSampler;
use tensorguard_nn::Module;

use super::{tg, Net, Res, TrainOptions};

/// The group to train in: `None` for a run of one process.
pub(super) fn join(opts: &TrainOptions) -> Res<Option<ProcessGroup>> {
    if !opts.distributed && !launched_by_mpi() {
        return Ok(None);
    }
    // with NCCL built in, cuda tensors are reduced on NCCL (the ranks still
    // come from MPI under mpirun; alone, a world of one on NCCL)
    let backend = if cfg!(feature = "nccl") {
        Backend::Nccl
    } else {
        Backend::Mpi
    };
    let group = tg(ProcessGroup::new(GroupOptions {
        backend,
        ..Default::default()
    }))?;
    Ok(Some(group))
}

/// This rank's shard of the training set (PyTorch's DistributedSampler:
/// padded so that every rank runs the same number of steps).
pub(super) fn shard(group: Option<&ProcessGroup>, seed: u64) -> Res<Option<DistributedSampler>> {
    let Some(g) = group else { return Ok(None) };
    let mut s = tg(DistributedSampler::new(g.world_size(), g.rank()))?;
    s.seed = seed;
    Ok(Some(s))
}

/// The device of this rank when `--device` is not given: the GPU of its
/// local rank, else the cpu.
pub(super) fn default_device(group: Option<&ProcessGroup>) -> Device {
    Device::cuda_if_available(group.map_or(0, ProcessGroup::local_rank))
}

/// Where rank `rank` writes a per-process file asked for as `path`: rank
/// 0 at `path`, the others at `name.rank{N}.ext` beside it (each rank's
/// trace and memory snapshot are its own).
pub(super) fn per_rank(path: &std::path::Path, rank: usize) -> std::path::PathBuf {
    if rank == 0 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.rank{rank}.{}", ext.to_string_lossy()),
        None => format!("{stem}.rank{rank}"),
    };
    path.with_file_name(name)
}

/// The model being trained: alone, or wrapped for data parallelism.
pub(super) enum Model {
    Plain(Net),
    Ddp(Box<DistributedDataParallel<Net>>),
}

impl Model {
    pub fn module(&self) -> &dyn Module {
        match self {
            Model::Plain(n) => n,
            Model::Ddp(d) => d.as_ref(),
        }
    }

    pub fn module_mut(&mut self) -> &mut dyn Module {
        match self {
            Model::Plain(n) => n,
            Model::Ddp(d) => d.as_mut(),
        }
    }

    /// The plain model (loading a checkpoint replaces its tensors, which
    /// happens before wrapping).
    pub fn net_mut(&mut self) -> Res<&mut Net> {
        match self {
            Model::Plain(n) => Ok(n),
            Model::Ddp(_) => Err("internal error: the checkpoint must be loaded before the model is wrapped for data parallelism".into()),
        }
    }

    /// Wrap for `group` (its gradients are then averaged in backward).
    pub fn wrap(self, group: &ProcessGroup) -> Res<Model> {
        match self {
            Model::Plain(n) => Ok(Model::Ddp(Box::new(tg(DistributedDataParallel::new(
                n,
                group,
                DdpOptions::default(),
            ))?))),
            m => Ok(m),
        }
    }

    /// Backward of one micro-batch; `sync`: the last micro-batch of the
    /// step, whose backward averages the accumulated gradients.
    pub fn backward(&self, loss: &Tensor, sync: bool) -> tensorguard::Result<()> {
        match self {
            Model::Ddp(d) if !sync => d.no_sync(|| loss.backward()),
            _ => loss.backward(),
        }
    }
}

/// Sum the running sums and the count `seen` of every rank (the epoch's
/// train loss and accuracy are then the global ones); alone, nothing is
/// done (no synchronisation).
pub(super) fn sum_over_ranks(
    group: Option<&ProcessGroup>,
    sums: &[&Tensor],
    seen: u64,
) -> Res<u64> {
    let Some(g) = group else { return Ok(seen) };
    for x in sums {
        tg(g.all_reduce_(x, ReduceOp::Sum))?;
    }
    let n = tg(Tensor::from_vec(
        vec![seen as i64],
        [1],
        &tensorguard::Device::Cpu,
    ))?;
    tg(g.all_reduce_(&n, ReduceOp::Sum))?;
    Ok(tg(n.to_vec::<i64>())?[0] as u64)
}

#[cfg(test)]
mod tests {
    use super::per_rank;
    use std::path::Path;

    #[test]
    fn rank_0_keeps_the_path_the_others_get_their_rank_beside_it() {
        assert_eq!(
            per_rank(Path::new("out/trace.json"), 0),
            Path::new("out/trace.json")
        );
        assert_eq!(
            per_rank(Path::new("out/trace.json"), 3),
            Path::new("out/trace.rank3.json")
        );
        assert_eq!(per_rank(Path::new("snap"), 1), Path::new("snap.rank1"));
    }
}
