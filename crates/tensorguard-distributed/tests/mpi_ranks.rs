//! The MPI engine with real ranks: `cargo test -p tensorguard-distributed
//! --features mpi --test mpi_ranks` starts this program, which launches
//! itself under `mpiexec -n 2` once per scenario and checks what the ranks
//! report. Under the launcher (`TG_MPI_SCENARIO` set) each rank runs the
//! scenario's checks; a failed check panics, which fails the rank and so
//! the launcher's exit status.
//!
//! Without the `mpi` feature, or without `mpiexec` on the PATH, it prints
//! why it skipped (and fails instead when TENSORGUARD_REQUIRE_MPI=1, as in
//! CI, which installs MPICH).

#[cfg(feature = "mpi")]
mod ranks;

fn main() {
    #[cfg(not(feature = "mpi"))]
    {
        println!("mpi_ranks: skipped: built without the `mpi` feature (cargo test -p tensorguard-distributed --features mpi)");
    }
    #[cfg(feature = "mpi")]
    ranks::main();
}
