//! NVRTC tests: every source compiles (when NVRTC is present), and the
//! disk cache round-trips.

use super::*;

/// NVRTC's library is loadable; otherwise the test prints why it skips
/// (or fails, when `TENSORGUARD_REQUIRE_NVRTC=1`: CI installs NVRTC so
/// that the kernels are compiled there, and must not skip silently).
fn have_nvrtc(test: &str) -> bool {
    match nvrtc_present() {
        Ok(()) => true,
        Err(e) if std::env::var("TENSORGUARD_REQUIRE_NVRTC").is_ok_and(|v| v == "1") => {
            panic!("{test}: TENSORGUARD_REQUIRE_NVRTC=1 but NVRTC was not found ({e})")
        }
        Err(e) => {
            println!("{test} skipped: NVRTC not found ({e})");
            false
        }
    }
}

fn cubin_target(arch: u32) -> Target {
    Target {
        arch: format!("sm_{arch}"),
        cubin: true,
        nvrtc: nvrtc_version(),
    }
}

/// Whether the ELF symbol `name` is in `image`.
fn has_symbol(image: &[u8], name: &str) -> bool {
    let mut needle = name.as_bytes().to_vec();
    needle.push(0);
    image.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn every_source_compiles_for_sm80_and_sm90() {
    if !have_nvrtc("every_source_compiles_for_sm80_and_sm90") {
        return;
    }
    let names = super::super::elementwise::tests::every_name();
    let mut jobs: Vec<(Source, Option<u32>, u32)> = Vec::new();
    for arch in [80, 90] {
        for p in 0..=15 {
            jobs.push((Source::Elementwise, Some(p), arch));
        }
        jobs.push((Source::Reduce, None, arch));
        jobs.push((Source::Index, None, arch));
    }
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = Mutex::new(Vec::<String>::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(src, part, arch)) = jobs.get(i) else {
                    break;
                };
                match compile(src, part, &cubin_target(arch)) {
                    Ok(img) => {
                        assert!(
                            img.bytes.starts_with(b"\x7fELF"),
                            "{src:?} {part:?}: not a CUBIN"
                        );
                        if src == Source::Elementwise {
                            for n in names.iter().filter(|n| src.part(n) == part) {
                                for name in [n.clone(), format!("{n}_s")] {
                                    if !has_symbol(&img.bytes, &name) {
                                        failures.lock().push(format!(
                                            "{name} missing from part {part:?} (sm_{arch})"
                                        ));
                                    }
                                }
                            }
                        }
                    }
                    Err(e) => failures
                        .lock()
                        .push(format!("{src:?} part {part:?} sm_{arch}: {e}")),
                }
            });
        }
    });
    let failures = failures.into_inner();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A fresh directory under the system's temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("tg-{tag}-{}-{nanos}", std::process::id()))
}

#[test]
fn disk_cache_round_trips_and_recovers() {
    if !have_nvrtc("disk_cache_round_trips_and_recovers") {
        return;
    }
    let dir = temp_dir("kcache");
    let get =
        |d: &Path| image_from_disk_or_nvrtc(Source::Elementwise, Some(0), (9, 0), Some(d)).unwrap();
    let (first, origin) = get(&dir);
    assert_eq!(origin, Origin::Compiled);
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let file = &files[0];
    let tail = format!("-sm_90-nvrtc{}.cubin", first.target.nvrtc_text());
    assert!(file.to_string_lossy().ends_with(&tail), "{file:?}");
    let (second, origin) = get(&dir);
    assert_eq!(origin, Origin::Disk);
    assert_eq!(second.bytes, first.bytes);
    assert_eq!(second.target, first.target);

    // a corrupt entry is compiled again and rewritten
    let mut data = std::fs::read(file).unwrap();
    let last = data.len() - 1;
    data[last] ^= 0xff;
    std::fs::write(file, &data).unwrap();
    assert_eq!(get(&dir).1, Origin::Compiled);
    assert_eq!(get(&dir).1, Origin::Disk);
    std::fs::write(file, b"TGKERN01").unwrap();
    assert_eq!(get(&dir).1, Origin::Compiled);

    // a directory that cannot be created is not an error
    let blocked = dir.join(files[0].file_name().unwrap()).join("sub");
    let (_, origin) = get(&blocked);
    assert_eq!(origin, Origin::Compiled);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_compile_error_names_the_file_the_arch_and_carries_the_log() {
    if !have_nvrtc("a_compile_error_names_the_file_the_arch_and_carries_the_log") {
        return;
    }
    let bad = Target {
        arch: "sm_1".to_string(),
        cubin: true,
        nvrtc: nvrtc_version(),
    };
    let err = match compile(Source::Elementwise, Some(0), &bad) {
        Err(e) => e,
        Ok(_) => panic!("sm_1 compiled"),
    };
    assert!(matches!(err, Error::KernelCompile { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("elementwise.cu") && msg.contains("sm_1") && msg.contains("report"),
        "{msg}"
    );
}

#[test]
fn cache_names_change_with_part_arch_and_version() {
    let t = |arch: &str, cubin, v| Target {
        arch: arch.to_string(),
        cubin,
        nvrtc: v,
    };
    let a = cache_name(Source::Elementwise, Some(3), &t("sm_90", true, (13, 0)));
    assert!(
        a.starts_with("elementwise-p3-") && a.ends_with("-sm_90-nvrtc13.0.cubin"),
        "{a}"
    );
    assert_ne!(
        a,
        cache_name(Source::Elementwise, Some(4), &t("sm_90", true, (13, 0)))
    );
    assert_ne!(
        a,
        cache_name(Source::Elementwise, Some(3), &t("sm_80", true, (13, 0)))
    );
    assert_ne!(
        a,
        cache_name(Source::Elementwise, Some(3), &t("sm_90", true, (13, 1)))
    );
    let p = cache_name(Source::Reduce, None, &t("compute_90", false, (13, 0)));
    assert!(p.starts_with("reduce-") && p.ends_with(".ptx"), "{p}");
    assert_eq!(fnv64(&[b"a"]), fnv64(&[b"a"]));
    assert_ne!(fnv64(&[b"ab"]), fnv64(&[b"a", b"b"]));
}

#[test]
fn a_gpu_newer_than_nvrtc_gets_ptx_and_an_older_one_an_error() {
    let archs = [75, 80, 86, 89, 90, 100, 120];
    let t = choose_target((9, 0), &archs, (13, 0)).unwrap();
    assert_eq!((t.arch.as_str(), t.cubin), ("sm_90", true));
    let t = choose_target((13, 0), &archs, (13, 0)).unwrap();
    assert_eq!((t.arch.as_str(), t.cubin), ("compute_120", false));
    let t = choose_target((8, 7), &archs, (13, 0)).unwrap();
    assert_eq!((t.arch.as_str(), t.cubin), ("compute_86", false));
    let err = choose_target((7, 0), &archs, (13, 0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sm_70") && err.contains("sm_75"), "{err}");
    let t = choose_target((9, 0), &[], (13, 0)).unwrap();
    assert_eq!(t.arch, "sm_90");
}
