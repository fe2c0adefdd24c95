//! The peers of `tensorguard bench compare`: candle and PyTorch, each a
//! child process that stays up for the whole run and speaks a line
//! protocol on stdin/stdout, so that the rounds can alternate between the
//! frameworks with each of them warm:
//!
//! - the peer starts by printing `ready {json}` (its version and threads);
//! - `setup <name> <kind> <args...>` → `ok`, or `skip <reason>`;
//! - `run <name> <budget_s> <min_reps> <max_reps>` → `ok <median_s> <reps> <inner>`;
//! - `free` → `ok`; `quit` ends it.
//!
//! Any failure is answered as `error <message>`. Finding the peers is here
//! too: the candle binary is built from `benches/candle-train/` (its own
//! workspace, so workspace builds never compile it) and PyTorch runs in a
//! virtual environment made with pip when torch is missing.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// How long a peer may take to answer one command.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// A running peer.
pub struct Peer {
    /// What it said in its `ready` line.
    pub info: Value,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

/// What a peer answered to `setup` or `run`.
pub enum Answer {
    /// `ok` and the words after it.
    Ok(Vec<String>),
    /// `skip <reason>`.
    Skip(String),
}

impl Peer {
    /// Start `cmd` and wait for its `ready` line.
    pub fn start(mut cmd: Command) -> Result<Peer, String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{cmd:?} could not be started: {e}"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err("its standard streams could not be opened".into());
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let err_text = Arc::new(Mutex::new(String::new()));
        let keep = Arc::clone(&err_text);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut s) = keep.lock() {
                    s.push_str(&line);
                    s.push('\n');
                    if s.len() > 4000 {
                        let cut = s.len() - 2000;
                        let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(0);
                        s.drain(..cut);
                    }
                }
            }
        });
        let mut peer = Peer {
            info: Value::Null,
            child,
            stdin,
            lines,
            stderr: err_text,
        };
        let first = peer.read_line()?;
        let Some(json) = first.strip_prefix("ready ") else {
            return Err(format!("it answered `{first}` instead of `ready {{...}}`"));
        };
        peer.info = serde_json::from_str(json).unwrap_or(Value::Null);
        Ok(peer)
    }

    fn read_line(&mut self) -> Result<String, String> {
        match self.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(l) => Ok(l),
            Err(e) => {
                let why = match e {
                    mpsc::RecvTimeoutError::Timeout => {
                        format!("it did not answer within {} s", ANSWER_TIMEOUT.as_secs())
                    }
                    mpsc::RecvTimeoutError::Disconnected => "it exited".to_string(),
                };
                let tail = self
                    .stderr
                    .lock()
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default();
                let last: Vec<&str> = tail.lines().rev().take(3).collect();
                let last: Vec<&str> = last.into_iter().rev().collect();
                Err(if last.is_empty() {
                    why
                } else {
                    format!("{why}; its last messages: {}", last.join(" / "))
                })
            }
        }
    }

    /// Send one command and read its answer.
    pub fn ask(&mut self, line: &str) -> Result<Answer, String> {
        writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("sending `{line}` failed: {e}"))?;
        let reply = self.read_line()?;
        let mut words = reply.split_whitespace();
        match words.next() {
            Some("ok") => Ok(Answer::Ok(words.map(str::to_string).collect())),
            Some("skip") => Ok(Answer::Skip(
                reply.trim_start_matches("skip").trim().to_string(),
            )),
            Some("error") => Err(reply.trim_start_matches("error").trim().to_string()),
            _ => Err(format!("`{line}` was answered with `{reply}`")),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        for _ in 0..20 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The repository whose `benches/` hold the peers: the one this binary
/// was built from, else the first folder above the current one that has
/// them.
pub fn repo_root() -> Option<PathBuf> {
    let has = |p: &Path| p.join("benches/peers/torch_compare.py").is_file();
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if has(&built) {
        return built.canonicalize().ok().or(Some(built));
    }
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors().find(|p| has(p)).map(Path::to_path_buf)
}

/// The cargo target folder of `root` (`$CARGO_TARGET_DIR` or `root/target`).
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// candle's version in the bench crate's lockfile.
pub fn candle_version(root: &Path) -> Option<String> {
    let lock = std::fs::read_to_string(root.join("benches/candle-train/Cargo.lock")).ok()?;
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == "name = \"candle-core\"" {
            let v = lines.next()?.trim().strip_prefix("version = \"")?;
            return Some(v.trim_end_matches('"').to_string());
        }
    }
    None
}

/// Build (or find up to date) and start the candle peer.
pub fn start_candle(root: &Path, quiet: bool) -> Result<Peer, String> {
    let bin = match std::env::var_os("TENSORGUARD_CANDLE_BIN") {
        Some(b) => PathBuf::from(b),
        None => {
            let target = target_dir(root).join("candle-bench");
            let manifest = root.join("benches/candle-train/Cargo.toml");
            if !quiet {
                eprintln!("candle: cargo build --release --manifest-path {} --bin candle-compare (CARGO_TARGET_DIR={}; minutes the first time)", manifest.display(), target.display());
            }
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let out = Command::new(cargo)
                .args(["build", "--release", "--bin", "candle-compare", "--manifest-path"])
                .arg(&manifest)
                .env("CARGO_TARGET_DIR", &target)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .map_err(|e| format!("cargo could not be run ({e}); install a Rust toolchain or pass --no-candle"))?;
            if !out.status.success() {
                let text = String::from_utf8_lossy(&out.stderr);
                let last: Vec<&str> = text.trim().lines().rev().take(3).collect();
                let last: Vec<&str> = last.into_iter().rev().collect();
                return Err(format!(
                    "the candle bench crate did not build (is crates.io reachable?): {}",
                    last.join(" / ")
                ));
            }
            target.join("release/candle-compare")
        }
    };
    let mut peer = Peer::start(Command::new(&bin))
        .map_err(|e| format!("the candle peer {} did not start: {e}", bin.display()))?;
    if let (Some(v), Value::Object(m)) = (candle_version(root), &mut peer.info) {
        m.insert("version".into(), Value::String(v));
    }
    Ok(peer)
}

/// The virtual environment PyTorch runs in: `$TENSORGUARD_BENCH_VENV`, else
/// `<target>/bench-venv`.
pub fn venv_dir(root: &Path) -> PathBuf {
    std::env::var_os("TENSORGUARD_BENCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir(root).join("bench-venv"))
}

fn has_torch(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import torch"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Make the venv and pip-install torch into it (the CPU wheel index
/// first, then PyPI's default wheel, which also runs on the cpu).
fn install_torch(venv: &Path, quiet: bool) -> Result<(), String> {
    let say = |m: &str| {
        if !quiet {
            eprintln!("torch: {m}");
        }
    };
    let python = venv.join("bin/python");
    if !python.is_file() {
        say(&format!("python3 -m venv {}", venv.display()));
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(format!(
                "`python3 -m venv {}` failed (is python3 with its venv module installed?)",
                venv.display()
            ));
        }
    }
    let pip = |extra: &[&str]| {
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--retries",
                "1",
                "--timeout",
                "30",
                "torch",
            ])
            .args(extra)
            .status()
            .is_ok_and(|s| s.success())
    };
    say("pip install torch --index-url https://download.pytorch.org/whl/cpu (a large download, once)");
    if pip(&["--index-url", "https://download.pytorch.org/whl/cpu"]) && has_torch(&python) {
        return Ok(());
    }
    say("the CPU wheel index did not work; pip install torch from the default index");
    if pip(&[]) && has_torch(&python) {
        return Ok(());
    }
    Err(format!(
        "pip could not install torch into {} (no network?); set TENSORGUARD_BENCH_VENV to a venv that has torch, or pass --no-torch",
        venv.display()
    ))
}

/// Find or make the venv and start the PyTorch peer.
pub fn start_torch(root: &Path, quiet: bool) -> Result<Peer, String> {
    let venv = venv_dir(root);
    let python = venv.join("bin/python");
    if !has_torch(&python) {
        install_torch(&venv, quiet)?;
    }
    let script = root.join("benches/peers/torch_compare.py");
    let mut cmd = Command::new(&python);
    cmd.arg(&script);
    Peer::start(cmd).map_err(|e| {
        format!(
            "the PyTorch peer ({} {}) did not start: {e}",
            python.display(),
            script.display()
        )
    })
}
