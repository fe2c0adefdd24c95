//! Helpers shared by the CLI's end-to-end tests.
#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Run the `tensorguard` binary with `args`, in the default device
/// configuration (two emulated devices: `TENSORGUARD_EMULATED` unset).
pub fn tg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorguard"))
        .args(args)
        .env_remove("TENSORGUARD_EMULATED")
        .output()
        .expect("the tensorguard binary runs")
}

/// A scratch folder `<file>_<name>` of this test run, created.
pub fn dir(file: &str, name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{file}_{name}"));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
