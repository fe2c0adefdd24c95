#!/usr/bin/env python3
"""Print the ratios the core benchmarks are judged by.

Reads criterion's medians from target/criterion (run
`cargo bench -p tensorguard --bench core` first) and, with --pytorch, runs
benches/peers/pytorch_bench.py in the same session (needs `pip install torch
numpy`; never needed to build or test tensorguard).

A second section prints the device-runtime ratios when the results of
`cargo bench -p tensorguard --bench device` exist, and a third the autograd
figures of `cargo bench -p tensorguard --bench autograd` (with --pytorch, next
to benches/peers/pytorch_autograd_bench.py run in the same session), and a
fourth the transfer ratios of `cargo bench -p tensorguard --bench transfer`.
Each section is skipped, with a note, when its results are missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRIT = os.path.join(ROOT, "target", "criterion")


def median(group, name):
    path = os.path.join(CRIT, group, name, "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"] * 1e-9  # seconds


def have(group, names):
    return all(os.path.exists(os.path.join(CRIT, group, n, "new", "estimates.json")) for n in names)


def fmt_time(s):
    if s < 1e-6:
        return f"{s * 1e9:.1f} ns"
    if s < 1e-3:
        return f"{s * 1e6:.2f} us"
    return f"{s * 1e3:.3f} ms"


def device_section():
    """Ratios of benches/device.rs (issue "Device runtime")."""
    print()
    print("device runtime (benches/device.rs)")
    need = {
        "alloc": ["cached_pair", "uncached", "cached_pair_emu", "std_alloc_1KiB",
                  "std_alloc_1KiB_align64", "empty_1GiB_fresh", "empty_1GiB_cached"],
        "dispatch": ["tiny_add_cpu", "tiny_add_emu", "tiny_add_cpu_item", "tiny_add_emu_item"],
        "alloc_threads": ["one_thread", "two_threads", "system_one_thread", "system_two_threads"],
    }
    m = medians(need, "device")
    if m is None:
        return
    rows = []
    cp, un = m["alloc/cached_pair"], m["alloc/uncached"]
    hit = "meets" if cp < 100e-9 else "MISSES"
    rows.append(("cached 1 KiB alloc+free, cpu", cp, f"{un / cp:.1f}x faster than uncached; {hit} the < 100 ns aim"))
    rows.append(("uncached (fresh 2 MiB segment)", un, "reference: empty_cache after each free"))
    ce = m["alloc/cached_pair_emu"]
    rows.append(("cached 1 KiB alloc+free, emu:0", ce, f"{ce / cp:.2f}x cpu's; {'meets' if ce < 100e-9 else 'MISSES'} the < 100 ns aim"))
    sa, sa64 = m["alloc/std_alloc_1KiB"], m["alloc/std_alloc_1KiB_align64"]
    rows.append(("std::alloc 1 KiB pair (align 16)", sa, f"peer: cached_pair is {cp / sa:.2f}x its time"))
    rows.append(("std::alloc 1 KiB pair (align 64)", sa64, f"peer: cached_pair is {cp / sa64:.2f}x its time"))
    gf, gc = m["alloc/empty_1GiB_fresh"], m["alloc/empty_1GiB_cached"]
    rows.append(("empty 1 GiB, fresh segment", gf, f"{'meets' if gf < 1e-3 else 'MISSES'} the < 1 ms aim"))
    rows.append(("empty 1 GiB, cached", gc, "reference: the block stays cached"))
    dc, de = m["dispatch/tiny_add_cpu"], m["dispatch/tiny_add_emu"]
    rows.append(("1-elem add, cpu", dc, "reference"))
    rows.append(("1-elem add enqueue, emu:0", de, f"{de / dc:.2f}x cpu (overhead {fmt_time(de - dc)}/op)"))
    ic, ie = m["dispatch/tiny_add_cpu_item"], m["dispatch/tiny_add_emu_item"]
    rows.append(("1-elem add + item(), cpu", ic, "reference"))
    rows.append(("1-elem add + item(), emu:0", ie, f"{ie / ic:.2f}x cpu (round trip)"))
    t1, t2 = m["alloc_threads/one_thread"], m["alloc_threads/two_threads"]
    rows.append(("alloc+free per pair, 1 thread", t1, "reference"))
    s1, s2 = m["alloc_threads/system_one_thread"], m["alloc_threads/system_two_threads"]
    rows.append(("alloc+free per pair, 2 threads", t2, f"{t1 / t2:.2f}x 1-thread throughput; "
                 f"{'meets' if t1 / t2 >= 1.8 else 'MISSES'} the >= 1.8x aim"))
    rows.append(("system malloc pair, 1 thread", s1, "peer: this machine's scaling"))
    rows.append(("system malloc pair, 2 threads", s2, f"{s1 / s2:.2f}x 1-thread throughput (the machine's limit)"))
    print(f"  {'benchmark':<34} {'median':>11}  ratio")
    for name, s, note in rows:
        print(f"  {name:<34} {fmt_time(s):>11}  {note}")


def run_peer(script):
    """Run a peer bench script with --json and return its results."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "peer.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "benches", "peers", script), "--json", out],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


def medians(need, bench):
    """Medians of every `group/name` in `need`, or None (with a note) when
    some are missing."""
    missing = [f"{g}/{n}" for g, ns in need.items() for n in ns if not have(g, [n])]
    if missing:
        print(f"  skipped: no results for {', '.join(missing)}; run "
              f"`cargo bench -p tensorguard --bench {bench} -- --noplot` first")
        return None
    return {f"{g}/{n}": median(g, n) for g, ns in need.items() for n in ns}


def autograd_section(args):
    """Figures of benches/autograd.rs: per-op recording cost, MLP step vs PyTorch, anomaly overhead."""
    print()
    print("autograd (benches/autograd.rs)")
    need = {
        "autograd_overhead": ["add_1elem_graph", "add_1elem_no_grad", "add_1elem_plain"],
        "autograd_mlp": ["step", "step_anomaly"],
    }
    m = medians(need, "autograd")
    if m is None:
        return
    torch = run_peer("pytorch_autograd_bench.py") if args.pytorch else None
    gr, ng, pl = (m[f"autograd_overhead/add_1elem_{k}"] for k in ("graph", "no_grad", "plain"))
    step, anom = m["autograd_mlp/step"], m["autograd_mlp/step_anomaly"]
    rows = [
        ("1-elem add, a requires grad", gr, f"{gr * 1e9:.0f} ns/op: graph recorded, then dropped"),
        ("1-elem add, under no_grad", ng, f"{ng * 1e9:.0f} ns/op; recording costs {(gr - ng) * 1e9:+.0f} ns/op "
                                          f"({gr / ng:.2f}x)"),
        ("1-elem add, no grad anywhere", pl, f"{pl * 1e9:.0f} ns/op; no_grad on a grad leaf costs "
                                             f"{(ng - pl) * 1e9:+.0f} ns/op"),
        ("MLP step 64x784-256-256-10 f32", step, "zero_grad + forward + cross-entropy + backward"),
        ("MLP step, detect_anomaly", anom, f"{anom / step:.1f}x the plain step (anomaly-mode overhead)"),
    ]
    print(f"  {'benchmark':<34} {'median':>11}  {'note':<62} {'PyTorch':>10} {'tg/torch':>8}")
    peer = {}
    if torch:
        peer = {
            "1-elem add, a requires grad": torch["tiny_add_graph_ns"] * 1e-9,
            "1-elem add, under no_grad": torch["tiny_add_no_grad_ns"] * 1e-9,
            "MLP step 64x784-256-256-10 f32": torch["mlp_step"],
        }
    for name, s, note in rows:
        t = peer.get(name)
        tcol = fmt_time(t) if t else ""
        rcol = f"{s / t:7.2f}x" if t else ""
        print(f"  {name:<34} {fmt_time(s):>11}  {note:<62} {tcol:>10} {rcol:>8}")
    if torch:
        print(f"  PyTorch {torch['torch_version']}, {torch['num_threads']} threads: MLP step "
              f"{torch['mlp_step'] * 1e3:.3f} ms; tensorguard takes {step / torch['mlp_step']:.2f}x PyTorch's time; "
              f"PyTorch records a node in {torch['tiny_add_graph_ns'] - torch['tiny_add_no_grad_ns']:+.0f} ns/op")
    else:
        print("  (pass --pytorch to run benches/peers/pytorch_autograd_bench.py for the PyTorch column)")


def transfer_section():
    """Ratios of benches/transfer.rs: pinned host->emu vs memcpy, the ledger's
    cost per 1 KiB copy, a pinned-allocator cache hit vs a fresh pin."""
    print()
    print("transfers (benches/transfer.rs)")
    need = {
        "transfer256M": ["memcpy_parallel", "h2d_pinned_nonblocking", "h2d_pageable_copy_"],
        "transfer_ledger": ["h2d_1KiB_on", "h2d_1KiB_off", "h2d_1KiB_nb64_on", "h2d_1KiB_nb64_off"],
        "pinned_alloc": ["cache_hit_4MiB", "fresh_4MiB"],
    }
    m = medians(need, "transfer")
    if m is None:
        return
    size = 256 * 1024 * 1024
    mc = m["transfer256M/memcpy_parallel"]
    pin = m["transfer256M/h2d_pinned_nonblocking"]
    pag = m["transfer256M/h2d_pageable_copy_"]
    on, off = m["transfer_ledger/h2d_1KiB_on"], m["transfer_ledger/h2d_1KiB_off"]
    # per copy: an iteration of the pipelined bench is 64 copies + 1 synchronize
    pon, poff = m["transfer_ledger/h2d_1KiB_nb64_on"] / 64, m["transfer_ledger/h2d_1KiB_nb64_off"] / 64
    pover = (pon - poff) / poff
    hit, fresh = m["pinned_alloc/cache_hit_4MiB"], m["pinned_alloc/fresh_4MiB"]
    gb = lambda s: size / s / 1e9
    over = (on - off) / off
    rows = [
        ("memcpy 256 MiB, parallel", mc, f"{gb(mc):.1f} GB/s (reference)"),
        ("host->emu 256 MiB, pinned, nb+wait", pin,
         f"{gb(pin):.1f} GB/s = {mc / pin:.2f} x memcpy; {'meets' if mc / pin >= 0.9 else 'MISSES'} the >= 0.9 aim"),
        ("host->emu 256 MiB, pageable copy_", pag, f"{gb(pag):.1f} GB/s = {mc / pag:.2f} x memcpy"),
        ("1 KiB host->emu copy_, ledger on", on, f"ledger+detector cost {(on - off) * 1e9:+.0f} ns/copy = {over * 100:+.1f}% "
                                                  f"of the copy; {'meets' if over < 0.05 else 'MISSES'} the < 5% aim"),
        ("1 KiB host->emu copy_, ledger off", off, "reference"),
        ("1 KiB pinned nb copy x64, ledger on", pon, f"per copy; ledger+detector cost {(pon - poff) * 1e9:+.0f} ns/copy = "
                                                     f"{pover * 100:+.1f}%; {'meets' if pover < 0.05 else 'MISSES'} the < 5% aim"),
        ("1 KiB pinned nb copy x64, ledger off", poff, "per copy (64 queued, then one synchronize); reference"),
        ("empty_pinned 4 MiB, cache hit", hit, f"{fresh / hit:.0f}x faster than a fresh pin"),
        ("empty_pinned 4 MiB, fresh pin", fresh, "reference: host_empty_cache() first"),
    ]
    print(f"  {'benchmark':<36} {'median':>11}  ratio")
    for name, s, note in rows:
        print(f"  {name:<36} {fmt_time(s):>11}  {note}")
    print("  (the blocking ledger pair is two timings and drifts on a shared machine; "
          "`cargo run --release -p tensorguard --example ledger_cost` gives the median of paired rounds)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pytorch", action="store_true", help="also run the PyTorch peer bench now")
    args = ap.parse_args()

    if have("bw16M", ["memcpy_parallel"]):
        core_section(args)
    else:
        print("core benchmarks: skipped: no results; run `cargo bench -p tensorguard --bench core` first")
    device_section()
    autograd_section(args)
    transfer_section()


def core_section(args):
    n = 16 * 1024 * 1024
    memcpy = median("bw16M", "memcpy_parallel")
    memcpy1 = median("bw16M", "memcpy_single")
    rows = []
    gbps = lambda bytes_, s: bytes_ / s / 1e9
    # bandwidth of an elementwise op = bytes read + written; memcpy moves 2 x 64 MiB
    bw_ref = gbps(2 * 4 * n, memcpy)
    for name, nbytes in [("add_alloc", 3), ("mul_alloc", 3), ("add_inplace", 3), ("copy_", 2), ("clone_alloc", 2)]:
        s = median("bw16M", name)
        rows.append((f"{name} 16M f32", s, f"{gbps(nbytes * 4 * n, s):.1f} GB/s = {gbps(nbytes * 4 * n, s) / bw_ref:.2f} x parallel memcpy ({bw_ref:.1f} GB/s)"))
    rows.append(("memcpy 64 MiB, 1 thread", memcpy1, f"{gbps(2 * 4 * n, memcpy1):.1f} GB/s"))
    tr = median("transpose4096", "t_contiguous")
    rows.append(("t().contiguous() 4096^2 f32", tr, ""))
    mm = median("matmul1024", "tensorguard")
    gd = median("matmul1024", "gemm_direct")
    rows.append(("matmul 1024 f32", mm, f"{gd / mm:.2f} x gemm called directly ({gd * 1e3:.2f} ms)"))
    tiny = median("tiny", "add_1elem")
    rows.append(("add of two 1-element tensors", tiny, f"{tiny * 1e9:.0f} ns/op"))
    rows.append(("add_ of two 1-element tensors", median("tiny", "add_inplace_1elem"), ""))

    torch = None
    if args.pytorch:
        torch = run_peer("pytorch_bench.py")
    peer = {
        "add_alloc 16M f32": "add_alloc_16M",
        "mul_alloc 16M f32": "mul_alloc_16M",
        "copy_ 16M f32": "copy_16M",
        "t().contiguous() 4096^2 f32": "transpose_contig_4096",
        "matmul 1024 f32": "matmul_1024",
        "add of two 1-element tensors": "tiny_add",
    }
    print(f"{'benchmark':<32} {'tensorguard':>12}  {'ratio / reference':<55} {'PyTorch':>10} {'speedup':>8}")
    for name, s, note in rows:
        t = torch.get(peer.get(name, ""), None) if torch else None
        tcol = f"{t * 1e3:9.3f}ms" if t else ""
        scol = f"{t / s:7.2f}x" if t else ""
        print(f"{name:<32} {s * 1e3:10.3f}ms  {note:<55} {tcol:>10} {scol:>8}")


if __name__ == "__main__":
    main()
