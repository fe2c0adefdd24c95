//! `tensorguard bench compare`: the same workloads in tensorguard (in this
//! process), candle and PyTorch CPU (peer processes, `compare_peers`),
//! interleaved: for each workload every framework sets up its inputs, then
//! each round runs the frameworks one after the other in a rotating order
//! (A/B/C, B/C/A, C/A/B, ...), each warm; a round's figure is the median
//! seconds per call after warm-up, and the table shows the median over the
//! rounds. The limits (memcpy, gemm) are measured in the same run.

use std::path::PathBuf;
use std::time::Instant;

use tensorguard::transfer::{self, RepeatPolicy};
use tensorguard::{memory, Device};

use super::args::CompareArgs;
use super::compare_limits;
use super::compare_output as output;
use super::compare_peers::{self, Answer, Peer};
use super::compare_report::{Cell, CompareReport, Framework, Row, FRAMEWORKS};
use super::compare_workloads::{self, measure, Spec};
use super::plot;

const MAX_ROUNDS: usize = 100;

fn settings(args: &CompareArgs) -> Result<(usize, f64, usize, usize), String> {
    let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 3 });
    if rounds == 0 || rounds > MAX_ROUNDS {
        return Err(format!("bench compare: `--rounds {rounds}` is out of range. Use 1 to {MAX_ROUNDS} (the default is 3)."));
    }
    let budget = args.budget.unwrap_or(if args.quick { 0.005 } else { 0.15 });
    if !(budget.is_finite() && budget > 0.0 && budget <= 60.0) {
        return Err(format!("bench compare: `--budget {budget}` must be a number of seconds above 0 and at most 60 (the default is 0.15)."));
    }
    let (min_reps, max_reps) = if args.quick { (1, 3) } else { (3, 1000) };
    Ok((rounds, budget, min_reps, max_reps))
}

fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Where `--save` writes, in the repository this binary was built from.
fn save_paths(args: &CompareArgs) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let root = compare_peers::repo_root().ok_or_else(|| {
        "bench compare: `--save` writes into the repository's benches/results/ and README.md, and no repository was found above the current folder. Run it from a checkout, or use --json/--png/--readme.".to_string()
    })?;
    let machine = output::machine_name(args.machine.as_deref());
    let dir = root.join("benches/results");
    Ok((
        dir.join(format!("{machine}.json")),
        dir.join(format!("{machine}.png")),
        root.join("README.md"),
    ))
}

/// `tensorguard bench compare`.
pub fn run_compare(args: &CompareArgs) -> Result<(), String> {
    let (rounds, budget, min_reps, max_reps) = settings(args)?;
    let specs = compare_workloads::select(args.only.as_deref())?;
    let (mut json_path, mut png_path, mut readme_path) =
        (args.json.clone(), args.png.clone(), args.readme.clone());
    if args.save {
        let (j, p, r) = save_paths(args)?;
        json_path = json_path.or(Some(j));
        png_path = png_path.or(Some(p));
        readme_path = readme_path.or(Some(r));
    }
    if let Some(p) = &png_path {
        plot::check_path(p)?;
    }
    if let Some(r) = &readme_path {
        output::check_readme(r)?;
    }
    let started = Instant::now();
    let load0 = loadavg();
    let say = |m: &str| {
        if !args.quiet {
            eprintln!("{m}");
        }
    };
    let mut frameworks: [Framework; 3] = Default::default();
    frameworks[0].info = serde_json::json!({
        "framework": "tensorguard",
        "version": env!("CARGO_PKG_VERSION"),
        "threads": rayon::current_num_threads(),
    });
    let root = compare_peers::repo_root();
    let mut peers: [Option<Peer>; 3] = [None, None, None];
    for (i, name) in FRAMEWORKS.iter().enumerate().skip(1) {
        let off = if i == 1 {
            args.no_candle
        } else {
            args.no_torch
        };
        let flag = if i == 1 { "--no-candle" } else { "--no-torch" };
        let peer = if off {
            Err(format!("left out by {flag}"))
        } else if let Some(root) = &root {
            say(&format!("== starting the {name} peer"));
            if i == 1 {
                compare_peers::start_candle(root, args.quiet)
            } else {
                compare_peers::start_torch(root, args.quiet)
            }
        } else {
            Err("its peer lives in the repository's benches/, and no repository was found above the current folder".into())
        };
        match peer {
            Ok(p) => {
                frameworks[i].info = p.info.clone();
                peers[i] = Some(p);
            }
            Err(why) => {
                say(&format!("{name}: skipped ({why})"));
                frameworks[i].skipped = Some(why);
            }
        }
    }

    say("== limits: memcpy (1 thread, all threads) and gemm called directly");
    let limits = compare_limits::measure_all(args.quick, budget.max(0.05))?;

    let before = transfer::repeat_policy();
    // `to_emu_*` copies the same host tensor again and again on purpose
    transfer::set_repeat_policy(RepeatPolicy::Off);
    let rows = run_rows(
        &specs,
        &mut peers,
        &mut frameworks,
        (rounds, budget, min_reps, max_reps),
        &say,
    );
    transfer::set_repeat_policy(before);
    drop(peers);
    // measured again after the workloads: the best of both (Limits::best_of)
    say("== limits again");
    let limits = limits.best_of(compare_limits::measure_all(args.quick, budget.max(0.05))?);
    let report = CompareReport {
        rows: rows?,
        limits,
        frameworks,
        rounds,
        budget,
        quick: args.quick,
        only: args.only.clone(),
        wall_s: started.elapsed().as_secs_f64(),
        load: (load0, loadavg()),
    };
    let table = output::table(&report);
    print!("{table}");
    if let Some(p) = &json_path {
        output::write(p, &output::json(&report))?;
        say(&format!("wrote {}", p.display()));
    }
    if let Some(p) = &png_path {
        super::compare_plot::draw(p, &report)?;
        say(&format!("wrote {}", p.display()));
    }
    if let Some(r) = &readme_path {
        output::update_readme(r, &report)?;
        say(&format!("updated the table in {}", r.display()));
    }
    Ok(())
}

fn run_rows(
    specs: &[Spec],
    peers: &mut [Option<Peer>; 3],
    frameworks: &mut [Framework; 3],
    (rounds, budget, min_reps, max_reps): (usize, f64, usize, usize),
    say: &dyn Fn(&str),
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for (k, spec) in specs.iter().enumerate() {
        say(&format!("== [{}/{}] {}", k + 1, specs.len(), spec.name));
        let mut cells: [Cell; 3] = Default::default();
        let mut work = Some(compare_workloads::setup(spec)?);
        for i in 1..3 {
            if let Some(p) = peers[i].as_mut() {
                match p.ask(&spec.setup_line()) {
                    Ok(Answer::Ok(_)) => {}
                    Ok(Answer::Skip(why)) => cells[i].skipped = Some(why),
                    Err(e) => cells[i].skipped = Some(format!("setup failed: {e}")),
                }
            } else {
                cells[i].skipped = frameworks[i].skipped.clone();
            }
        }
        for r in 0..rounds {
            for j in 0..3 {
                let i = (r + j) % 3;
                if cells[i].skipped.is_some() {
                    continue;
                }
                let got = if i == 0 {
                    match work.as_mut() {
                        Some(w) => measure(w.as_mut(), budget, min_reps, max_reps)
                            .map(|(m, _, _)| m)
                            .map_err(|e| e.to_string()),
                        None => Err("its inputs are gone".to_string()),
                    }
                } else {
                    run_peer(peers[i].as_mut(), spec, budget, min_reps, max_reps)
                };
                match got {
                    Ok(s) => cells[i].rounds.push(s),
                    Err(e) => {
                        say(&format!("{}: {} failed: {e}", FRAMEWORKS[i], spec.name));
                        cells[i].skipped = Some(format!("failed: {e}"));
                        cells[i].rounds.clear();
                    }
                }
            }
        }
        drop(work.take());
        memory::empty_cache(&Device::Cpu);
        memory::empty_cache(&Device::Emulated(0));
        memory::host_empty_cache();
        for i in 1..3 {
            let dead = match peers[i].as_mut() {
                Some(p) => p.ask("free").err(),
                None => None,
            };
            if let Some(e) = dead {
                say(&format!("{}: left out from here on: {e}", FRAMEWORKS[i]));
                frameworks[i].skipped = Some(format!("stopped answering after {}: {e}", spec.name));
                peers[i] = None;
            }
        }
        rows.push(Row {
            spec: spec.clone(),
            cells,
        });
    }
    Ok(rows)
}

fn run_peer(
    peer: Option<&mut Peer>,
    spec: &Spec,
    budget: f64,
    min_reps: usize,
    max_reps: usize,
) -> Result<f64, String> {
    let peer = peer.ok_or("its peer is not running")?;
    let line = format!("run {} {budget} {min_reps} {max_reps}", spec.name);
    match peer.ask(&line)? {
        Answer::Ok(words) => words
            .first()
            .and_then(|w| w.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .ok_or_else(|| format!("`{line}` was answered with `ok {}`", words.join(" "))),
        Answer::Skip(why) => Err(why),
    }
}
