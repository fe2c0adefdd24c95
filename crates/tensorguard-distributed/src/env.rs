//! How a process learns where it stands: from the MPI launcher, and
//! PyTorch's environment variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `MASTER_ADDR`) where they are set, checked against each other.

use tensorguard::{Error, Result};

/// Variables MPI launchers set in every process they start (MPICH's and
/// Intel MPI's Hydra, OpenMPI, PMIx launchers, Slurm's srun with PMI).
const LAUNCHER_VARS: [&str; 5] = [
    "PMI_RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK",
    "MPI_LOCALRANKID",
    "PMI_SIZE",
];

/// Whether an MPI launcher (`mpirun`, `mpiexec`, `srun`) started this
/// process.
pub fn launched_by_mpi() -> bool {
    LAUNCHER_VARS.iter().any(|v| std::env::var_os(v).is_some())
}

/// A non-negative integer variable, `None` when unset.
pub(crate) fn var_usize(op: &'static str, name: &str) -> Result<Option<usize>> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(s) => s.trim().parse::<usize>().map(Some).map_err(|_| Error::InvalidArgument {
            op,
            message: format!(
                "the environment variable {name}={s:?} is not a non-negative integer. Unset it, or set it to this process's {}.",
                if name.contains("SIZE") { "number of processes" } else { "rank" }
            ),
        }),
    }
}

/// The rank of this process among those on its machine, where a launcher
/// or the user said it.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn local_rank_from_env(op: &'static str) -> Result<Option<usize>> {
    for name in [
        "LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
    ] {
        if let Some(r) = var_usize(op, name)? {
            return Ok(Some(r));
        }
    }
    Ok(None)
}

/// PyTorch's `RANK`/`WORLD_SIZE`, where set, must agree with what the
/// engine says (a script written for torchrun launched under mpirun with
/// stale variables would otherwise shard the data wrongly).
pub(crate) fn check_against_env(op: &'static str, rank: usize, world_size: usize) -> Result<()> {
    for (name, have) in [("RANK", rank), ("WORLD_SIZE", world_size)] {
        if let Some(v) = var_usize(op, name)? {
            if v != have {
                return Err(Error::Distributed {
                    op,
                    rank,
                    world_size,
                    message: format!(
                        "the environment says {name}={v} but the launcher made this process {} {have}. Launch with `mpirun -np N` and leave {name} unset (or set it to what mpirun assigns).",
                        if name == "RANK" { "rank" } else { "one of" }
                    ),
                });
            }
        }
    }
    Ok(())
}
