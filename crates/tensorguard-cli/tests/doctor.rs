//! `tensorguard doctor`: a device that does not exist or a configuration
//! that can't be read is a failure with the reason, never a silent success;
//! `-v`/`-q` set how much the logger prints.

use std::process::{Command, Output};

fn tg(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorguard"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("TENSORGUARD_EMULATED");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the tensorguard binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn doctor_checks_every_device_and_succeeds() {
    let out = tg(&["doctor"], &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("cpu      ok: self-check passed"),
        "{stdout}"
    );
    assert!(
        stdout.contains("emu:1    ok: self-check passed"),
        "{stdout}"
    );
}

#[test]
fn doctor_on_a_device_that_does_not_exist_fails_with_the_reason() {
    let out = tg(&["doctor", "--device", "emu:7"], &[]);
    assert!(!out.status.success(), "exit status 0 for emu:7");
    let err = text(&out.stderr);
    assert!(err.contains("emu:7 does not exist"), "{err}");
    assert!(err.contains("TENSORGUARD_EMULATED"), "{err}");
    let out = tg(&["doctor", "--device", "tpu:0"], &[]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("tpu:0"), "{}", text(&out.stderr));
}

#[test]
fn doctor_with_a_bad_emulated_configuration_fails_with_the_reason() {
    for bad in ["lots", "4294967296x1KiB", "999999x1GiB"] {
        let out = tg(&["doctor"], &[("TENSORGUARD_EMULATED", bad)]);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!out.status.success(), "exit status 0 for {bad}: {all}");
        assert!(
            all.contains(bad),
            "the message names the setting {bad}: {all}"
        );
        // The cpu is still checked and reported.
        assert!(all.contains("cpu      ok"), "{all}");
    }
}

#[test]
fn verbosity_flags_set_what_the_logger_prints() {
    let quiet_default = tg(&["doctor", "--device", "cpu"], &[]);
    assert!(quiet_default.status.success());
    assert!(
        !text(&quiet_default.stderr).contains("self-check"),
        "info lines are hidden by default: {}",
        text(&quiet_default.stderr)
    );
    let verbose = tg(&["-v", "doctor", "--device", "cpu"], &[]);
    assert!(verbose.status.success());
    let err = text(&verbose.stderr);
    assert!(
        err.contains("INFO") && err.contains("cpu: self-check"),
        "{err}"
    );
    let quiet = tg(&["doctor", "--device", "cpu", "-q"], &[]);
    assert!(quiet.status.success());
    assert!(quiet.stderr.is_empty(), "{}", text(&quiet.stderr));
    let both = tg(&["-q", "-v", "doctor"], &[]);
    assert!(!both.status.success(), "-q and -v contradict each other");
}
