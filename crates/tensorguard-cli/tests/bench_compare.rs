//! `tensorguard bench compare` end to end: a smoke run of the `add`
//! workloads with the peers left out, its JSON's keys and its errors. No
//! timing is asserted beyond "positive": timings never go into tests.

mod common;

use common::{dir, tg};

#[test]
fn quick_add_run_writes_json_plot_and_readme_table() {
    let d = dir("bench_compare", "smoke");
    let (json, png, readme) = (d.join("c.json"), d.join("c.png"), d.join("README.md"));
    std::fs::write(
        &readme,
        "# x\n\n<!-- bench-compare:begin -->\nold\n<!-- bench-compare:end -->\n\nafter\n",
    )
    .unwrap();
    let out = tg(&[
        "bench",
        "compare",
        "--quick",
        "--no-torch",
        "--no-candle",
        "--only",
        "add_1K,add_64K",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
        "--png",
        png.to_str().unwrap(),
        "--readme",
        readme.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for w in ["add_1K", "add_1K_t", "add_64K", "add_64K_t", "tg/torch"] {
        assert!(stdout.contains(w), "{w} missing from the table:\n{stdout}");
    }
    assert!(
        stdout.contains("candle: skipped: left out by --no-candle"),
        "{stdout}"
    );

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for k in [
        "schema",
        "machine",
        "settings",
        "limits",
        "frameworks",
        "workloads",
        "notes",
        "table_markdown",
    ] {
        assert!(v.get(k).is_some(), "JSON key {k} missing");
    }
    for k in [
        "cpu",
        "logical_cores",
        "memory_bytes",
        "os",
        "rustc",
        "date",
    ] {
        assert!(v["machine"].get(k).is_some(), "machine.{k} missing");
    }
    for k in ["memcpy_1t_GBps", "memcpy_all_GBps", "gemm_peak_GFLOPs"] {
        assert!(
            v["limits"][k].as_f64().is_some_and(|x| x > 0.0),
            "limits.{k}"
        );
    }
    assert!(v["frameworks"]["torch"]["skipped"]
        .as_str()
        .unwrap()
        .contains("--no-torch"));
    let w = v["workloads"].as_array().unwrap();
    assert_eq!(w.len(), 4);
    for row in w {
        let tg = &row["frameworks"]["tensorguard"];
        assert!(tg["median_s"].as_f64().is_some_and(|s| s > 0.0), "{row}");
        assert!(row["frameworks"]["candle"]["median_s"].is_null());
        assert!(row["ratio_tg_torch"].is_null());
        assert!(
            row["fraction_of_limit"].as_f64().is_some_and(|f| f > 0.0),
            "{row}"
        );
        assert_eq!(row["limit"], "memcpy 1t");
    }
    let png_bytes = std::fs::read(&png).unwrap();
    assert_eq!(&png_bytes[..4], b"\x89PNG");
    let text = std::fs::read_to_string(&readme).unwrap();
    assert!(
        text.starts_with("# x\n\n<!-- bench-compare:begin -->\nMeasured on "),
        "{text}"
    );
    assert!(
        text.contains("| add_64K_t |") && !text.contains("old\n"),
        "{text}"
    );
    assert!(
        text.ends_with("<!-- bench-compare:end -->\n\nafter\n"),
        "{text}"
    );
}

#[test]
fn bad_options_fail_with_a_sentence() {
    let e = tg(&[
        "bench",
        "compare",
        "--only",
        "nothing-like-this",
        "--no-torch",
        "--no-candle",
    ]);
    assert!(!e.status.success());
    let msg = String::from_utf8_lossy(&e.stderr);
    assert!(
        msg.contains("no workload matches") && msg.contains("matmul_1024"),
        "{msg}"
    );
    let e = tg(&[
        "bench",
        "compare",
        "--rounds",
        "0",
        "--no-torch",
        "--no-candle",
    ]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("`--rounds 0` is out of range"));
    let d = dir("bench_compare", "errors");
    let readme = d.join("no-markers.md");
    std::fs::write(&readme, "# nothing here\n").unwrap();
    let e = tg(&[
        "bench",
        "compare",
        "--no-torch",
        "--no-candle",
        "--readme",
        readme.to_str().unwrap(),
    ]);
    let msg = String::from_utf8_lossy(&e.stderr);
    assert!(
        msg.contains("has no `<!-- bench-compare:begin -->`"),
        "{msg}"
    );
    let e = tg(&[
        "bench",
        "compare",
        "--no-torch",
        "--no-candle",
        "--png",
        "x.gif",
    ]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("needs a `.png` or `.svg`"));
}
