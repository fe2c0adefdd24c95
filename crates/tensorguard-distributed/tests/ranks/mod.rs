//! The launcher and the scenarios each rank runs (see `mpi_ranks.rs`).

mod collectives;
mod ddp;

use std::process::Command;

use tensorguard_distributed::{launched_by_mpi, GroupOptions, ProcessGroup};

/// The scenarios, each one `mpiexec -n 2` run.
const SCENARIOS: [&str; 3] = ["collectives", "ddp", "dead_rank"];

pub fn main() {
    match std::env::var("TG_MPI_SCENARIO") {
        Ok(s) if launched_by_mpi() => run_rank(&s),
        _ => launch_all(),
    }
}

fn mpiexec() -> Option<(String, bool)> {
    for name in ["mpiexec", "mpirun"] {
        if let Ok(out) = Command::new(name).arg("--version").output() {
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            return Some((name.to_string(), text.contains("Open MPI")));
        }
    }
    None
}

fn launch_all() {
    let Some((launcher, openmpi)) = mpiexec() else {
        let why = "mpi_ranks: skipped: no mpiexec on the PATH (Debian: apt-get install mpich libmpich-dev)";
        if std::env::var("TENSORGUARD_REQUIRE_MPI").as_deref() == Ok("1") {
            panic!("{why}, and TENSORGUARD_REQUIRE_MPI=1 says the MPI tests must run");
        }
        println!("{why}");
        return;
    };
    let me = std::env::current_exe().expect("the test binary's path");
    let mut failed = Vec::new();
    for scenario in SCENARIOS {
        let mut cmd = Command::new(&launcher);
        if openmpi {
            cmd.args(["--allow-run-as-root", "--oversubscribe"]);
        }
        if scenario == "dead_rank" {
            // let the surviving rank report instead of being killed with
            // the dead one (MPICH's Hydra; OpenMPI does not kill on exit 0)
            if !openmpi {
                cmd.arg("-disable-auto-cleanup");
            }
        }
        cmd.args(["-n", "2"])
            .arg(&me)
            .env("TG_MPI_SCENARIO", scenario);
        // a hang fails in a minute, not in the default ten
        cmd.env(
            "TENSORGUARD_DIST_TIMEOUT",
            if scenario == "dead_rank" { "3" } else { "60" },
        );
        let start = std::time::Instant::now();
        let out = cmd.output().expect("mpiexec runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        let ok = match scenario {
            "dead_rank" => text.contains("DEAD-RANK-REPORTED"),
            _ => out.status.success() && text.matches("SCENARIO-OK").count() == 2,
        };
        println!(
            "mpi_ranks: {scenario}: {} in {:.1} s",
            if ok { "ok" } else { "FAILED" },
            start.elapsed().as_secs_f64()
        );
        if !ok {
            println!("--- output of {scenario} ---\n{text}\n---");
            failed.push(scenario);
        }
    }
    assert!(failed.is_empty(), "MPI scenarios failed: {failed:?}");
}

fn run_rank(scenario: &str) {
    // a failed check ends the whole job at once: unwinding would drop the
    // group, whose MPI_Finalize waits for the other rank
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        std::process::abort();
    }));
    let pg = ProcessGroup::new(GroupOptions::default()).expect("the MPI group");
    assert_eq!(pg.backend_name(), "mpi");
    assert_eq!(pg.world_size(), 2, "run with -n 2");
    match scenario {
        "collectives" => collectives::run(&pg),
        "ddp" => ddp::run(&pg),
        "dead_rank" => dead_rank(&pg),
        other => panic!("unknown scenario {other}"),
    }
    println!("SCENARIO-OK rank {}", pg.rank());
}

/// Rank 1 dies without a word; rank 0's next collective must end with the
/// timeout error naming rank 1, not hang.
fn dead_rank(pg: &ProcessGroup) {
    use tensorguard::{DType, Device, Tensor};
    use tensorguard_distributed::ReduceOp;
    let t = Tensor::ones([1024], DType::F32, &Device::Cpu).unwrap();
    pg.all_reduce_(&t, ReduceOp::Sum).unwrap();
    if pg.rank() == 1 {
        // a crash: no finalize, no goodbye
        std::process::exit(3);
    }
    let start = std::time::Instant::now();
    let err = pg.all_reduce_(&t, ReduceOp::Sum).unwrap_err().to_string();
    let took = start.elapsed().as_secs_f64();
    assert!(
        err.contains("rank 0 of 2") && err.contains("all_reduce_"),
        "{err}"
    );
    assert!(err.contains("rank 1 did not answer"), "{err}");
    assert!(err.contains("within 3.0 s"), "{err}");
    assert!(took < 10.0, "the error came after {took:.1} s");
    // the group refuses further collectives at once
    let again = pg.barrier().unwrap_err().to_string();
    assert!(again.contains("broken"), "{again}");
    println!("DEAD-RANK-REPORTED after {took:.1} s: {err}");
    // the engine thread is stuck on the collective MPI cannot cancel
    std::process::exit(0);
}
