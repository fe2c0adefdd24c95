use super::super::raw::HostRaw;
use super::blocks::free_key;
use super::snapshot::SegmentInfo;
use super::*;
use std::sync::Arc;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

#[track_caller]
fn here() -> &'static Location<'static> {
    Location::caller()
}

fn host(cap: Option<usize>) -> (CachingAllocator, Arc<HostRaw>) {
    let raw = Arc::new(HostRaw::new(cap));
    (
        CachingAllocator::new("emu:0".into(), Box::new(Arc::clone(&raw))),
        raw,
    )
}

#[track_caller]
fn alloc(a: &CachingAllocator, bytes: usize, stream: StreamId) -> Allocation {
    a.allocate(bytes, stream, Location::caller())
        .expect("allocation should succeed")
}

/// Checks the allocator's invariants against its statistics; returns the snapshot.
fn check(a: &CachingAllocator) -> Vec<SegmentInfo> {
    let segs = a.segments();
    let s = a.stats();
    let (mut reserved, mut allocated, mut requested, mut n_alloc) = (0, 0, 0, 0);
    let (mut split_n, mut split_bytes, mut largest) = (0, 0, 0);
    let (mut small_reserved, mut small_segs) = (0, 0);
    for seg in &segs {
        reserved += seg.total_size;
        if seg.pool == PoolKind::Small {
            small_reserved += seg.total_size;
            small_segs += 1;
        }
        assert_eq!(seg.blocks[0].address, seg.address);
        let mut end = seg.address;
        let mut prev_free = false;
        for b in &seg.blocks {
            assert_eq!(b.address, end, "blocks are contiguous");
            assert!(b.size >= MIN_BLOCK_SIZE && b.size % MIN_BLOCK_SIZE == 0);
            end += b.size;
            let free = b.state == BlockState::Inactive;
            assert!(
                !(free && prev_free),
                "adjacent free blocks must have merged"
            );
            prev_free = free;
            if free {
                assert_eq!((b.requested, b.site), (0, None));
                largest = largest.max(b.size);
                if seg.blocks.len() > 1 {
                    split_n += 1;
                    split_bytes += b.size;
                }
            } else {
                assert!(b.site.is_some() && b.requested <= b.size && b.requested > 0);
                allocated += b.size;
                requested += b.requested;
                n_alloc += 1;
            }
        }
        assert_eq!(
            end,
            seg.address + seg.total_size,
            "blocks cover the segment"
        );
    }
    assert_eq!(s.reserved_bytes.all.current, reserved as i64);
    assert_eq!(s.reserved_bytes.small_pool.current, small_reserved as i64);
    assert_eq!(s.segment.all.current, segs.len() as i64);
    assert_eq!(s.segment.small_pool.current, small_segs);
    assert_eq!(s.allocated_bytes.all.current, allocated as i64);
    assert_eq!(s.active_bytes, s.allocated_bytes);
    assert_eq!(s.active, s.allocation);
    assert_eq!(s.requested_bytes.all.current, requested as i64);
    assert_eq!(s.allocation.all.current, n_alloc);
    assert_eq!(s.inactive_split.all.current, split_n);
    assert_eq!(s.inactive_split_bytes.all.current, split_bytes as i64);
    assert_eq!(a.largest_free_block(), largest);
    for arr in [
        &s.allocation,
        &s.segment,
        &s.allocated_bytes,
        &s.reserved_bytes,
        &s.inactive_split,
    ] {
        assert_eq!(
            arr.all.current,
            arr.small_pool.current + arr.large_pool.current
        );
        assert_eq!(arr.all.allocated - arr.all.freed, arr.all.current);
    }
    segs
}

#[test]
fn rounding_rules() {
    assert_eq!(round_size(1), 512);
    assert_eq!(round_size(512), 512);
    assert_eq!(round_size(513), 1024);
    assert_eq!(round_size(1000), 1024);
    assert_eq!(checked_round_size(usize::MAX), None);
    assert_eq!(allocation_size(512), Some(2 * MIB));
    assert_eq!(allocation_size(MIB), Some(2 * MIB));
    assert_eq!(allocation_size(MIB + 512), Some(20 * MIB));
    assert_eq!(allocation_size(10 * MIB - 512), Some(20 * MIB));
    assert_eq!(allocation_size(10 * MIB), Some(10 * MIB));
    assert_eq!(allocation_size(11 * MIB + 512), Some(12 * MIB));
    assert_eq!(allocation_size(usize::MAX - 511), None);
}

#[test]
fn free_keys_order_by_stream_size_address() {
    let k = |s, n, a| free_key(s, n, a);
    assert!(k(0, 1024, 1 << 40) < k(0, 1536, 64));
    assert!(k(0, 1024, 64) < k(0, 1024, 128));
    assert!(k(0, (1 << 49) - 512, (1 << 62) - 64) < k(1, 512, 64));
    assert!(key_fits(1 << 47, 20 * MIB));
    assert!(!key_fits(usize::MAX & !63, 512));
    assert!(!key_fits(64, 1 << 60));
}

#[test]
fn exact_stats_for_known_sequence() {
    let (a, raw) = host(None);
    let x = alloc(&a, 1000, 0);
    assert_eq!((x.size(), x.requested(), x.stream()), (1024, 1000, 0));
    assert_eq!(x.ptr().addr() % 64, 0);
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.current, 1024);
    assert_eq!(s.allocated_bytes.small_pool.current, 1024);
    assert_eq!(s.allocated_bytes.large_pool.current, 0);
    assert_eq!(s.requested_bytes.all.current, 1000);
    assert_eq!(s.reserved_bytes.all.current, 2 * MIB as i64);
    assert_eq!(s.segment.all.current, 1);
    assert_eq!(s.allocation.all.current, 1);
    assert_eq!(s.inactive_split.all.current, 1);
    assert_eq!(s.inactive_split_bytes.all.current, (2 * MIB - 1024) as i64);
    check(&a);

    let p = x.ptr();
    a.free(x);
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.current, 0);
    assert_eq!(s.allocated_bytes.all.peak, 1024);
    assert_eq!(s.allocated_bytes.all.freed, 1024);
    assert_eq!(s.reserved_bytes.all.current, 2 * MIB as i64);
    assert_eq!(s.inactive_split.all.current, 0);
    assert_eq!(s.inactive_split_bytes.all.current, 0);
    assert_eq!(s.allocation.all.freed, 1);
    assert_eq!(a.largest_free_block(), 2 * MIB);
    check(&a);

    let y = alloc(&a, 1000, 0);
    assert_eq!(y.ptr(), p, "cached block is reused");
    let s = a.stats();
    assert_eq!(s.segment.all.allocated, 1, "no new segment");
    assert_eq!(s.allocation.all.allocated, 2);
    assert_eq!(raw.used(), 2 * MIB);
    a.free(y);

    a.empty_cache();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.all.current, 0);
    assert_eq!(s.reserved_bytes.all.peak, 2 * MIB as i64);
    assert_eq!(s.segment.all.current, 0);
    assert_eq!(s.segment.all.freed, 1);
    assert_eq!(raw.used(), 0);
    assert!(check(&a).is_empty());
}

#[test]
fn zero_sized_allocation_is_free_of_charge() {
    let (a, raw) = host(None);
    let z = alloc(&a, 0, 3);
    assert_eq!((z.size(), z.requested(), z.stream()), (0, 0, 3));
    assert_eq!(z.ptr().addr() % 64, 0);
    assert_eq!(a.stats(), MemoryStats::default());
    a.free(z);
    assert_eq!(a.stats(), MemoryStats::default());
    assert_eq!(raw.used(), 0);
}

#[test]
fn split_and_coalesce_in_every_order() {
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let (a, _raw) = host(None);
        let mut blocks: Vec<Option<Allocation>> = [4 * KIB, 1000, 64 * KIB]
            .iter()
            .map(|&n| Some(alloc(&a, n, 0)))
            .collect();
        let segs = check(&a);
        assert_eq!(segs.len(), 1);
        let sizes: Vec<usize> = segs[0].blocks.iter().map(|b| b.size).collect();
        assert_eq!(sizes, [4 * KIB, 1024, 64 * KIB, 2 * MIB - 69 * KIB]);
        let base = segs[0].address;
        assert_eq!(blocks[0].as_ref().unwrap().ptr().addr(), base);
        assert_eq!(blocks[1].as_ref().unwrap().ptr().addr(), base + 4 * KIB);
        assert_eq!(blocks[2].as_ref().unwrap().ptr().addr(), base + 5 * KIB);
        for &k in &order {
            a.free(blocks[k].take().unwrap());
            check(&a);
        }
        let segs = check(&a);
        assert_eq!(
            segs[0].blocks.len(),
            1,
            "order {order:?} merged back to one block"
        );
        assert_eq!(segs[0].blocks[0].size, 2 * MIB);
        let s = a.stats();
        assert_eq!(s.inactive_split.all.current, 0);
        assert_eq!(s.inactive_split_bytes.all.current, 0);
        assert_eq!(s.allocated_bytes.all.current, 0);
    }
}

#[test]
fn best_fit_picks_smallest_sufficient_block() {
    let (a, _raw) = host(None);
    let a1 = alloc(&a, 4 * KIB, 0);
    let sep1 = alloc(&a, 512, 0);
    let a2 = alloc(&a, 8 * KIB, 0);
    let sep2 = alloc(&a, 512, 0);
    let (p1, p2) = (a1.ptr(), a2.ptr());
    a.free(a1);
    a.free(a2);
    check(&a);
    // 6 KiB fits only the 8 KiB hole (and the tail); best fit takes the hole.
    let b = alloc(&a, 6 * KIB, 0);
    assert_eq!(b.ptr(), p2);
    // 3 KiB fits the 4 KiB hole and the 2 KiB rest of the 8 KiB hole does not.
    let c = alloc(&a, 3 * KIB, 0);
    assert_eq!(c.ptr(), p1);
    // 2 KiB: the remaining 2 KiB hole after b is the best fit.
    let d = alloc(&a, 2 * KIB, 0);
    assert_eq!(d.ptr().addr(), p2.addr() + 6 * KIB);
    check(&a);
    for x in [b, c, d, sep1, sep2] {
        a.free(x);
    }
    assert_eq!(check(&a)[0].blocks.len(), 1);
}

#[test]
fn large_pool_rounding_and_split_threshold() {
    let (a, raw) = host(None);
    // Just above 1 MiB: large pool, 20 MiB segment, remainder split off.
    let x = alloc(&a, MIB + 1, 0);
    assert_eq!(x.size(), MIB + 512);
    let s = a.stats();
    assert_eq!(s.reserved_bytes.large_pool.current, 20 * MIB as i64);
    assert_eq!(s.allocated_bytes.large_pool.current, (MIB + 512) as i64);
    assert_eq!(s.segment.small_pool.current, 0);
    a.free(x);
    // 19.5 MiB from the cached 20 MiB segment: remainder 0.5 MiB <= 1 MiB stays attached.
    let y = alloc(&a, 19 * MIB + 512 * KIB, 0);
    assert_eq!(y.size(), 20 * MIB);
    assert_eq!(y.requested(), 19 * MIB + 512 * KIB);
    assert_eq!(a.stats().segment.all.allocated, 1);
    assert_eq!(a.stats().inactive_split.all.current, 0);
    // Remainder of exactly 1 MiB is not split either; more than 1 MiB is.
    let z = alloc(&a, 11 * MIB + 1, 0);
    assert_eq!(
        z.size(),
        12 * MIB,
        "a 12 MiB segment whose remainder (< 1 MiB) is not split off"
    );
    check(&a);
    let segs = a.segments();
    assert_eq!(segs.len(), 2);
    assert!(segs
        .iter()
        .any(|s| s.total_size == 12 * MIB && s.blocks.len() == 1));
    let w = alloc(&a, 24 * MIB, 0);
    assert_eq!(w.size(), 24 * MIB);
    assert_eq!(
        a.stats().reserved_bytes.large_pool.current,
        (20 + 12 + 24) as i64 * MIB as i64
    );
    assert_eq!(raw.used(), 56 * MIB);
    for v in [y, z, w] {
        a.free(v);
    }
    check(&a);
    a.empty_cache();
    assert_eq!(raw.used(), 0);
}

#[test]
fn streams_do_not_share_cached_blocks() {
    let (a, _raw) = host(None);
    let x = alloc(&a, 4096, 1);
    let p = x.ptr();
    a.free(x);
    let y = alloc(&a, 4096, 2);
    assert_ne!(
        y.ptr(),
        p,
        "a block freed on stream 1 is not reused for stream 2"
    );
    assert_eq!(y.stream(), 2);
    assert_eq!(a.stats().segment.all.current, 2);
    let z = alloc(&a, 4096, 1);
    assert_eq!(z.ptr(), p, "but it is reused on stream 1");
    let segs = check(&a);
    let mut streams: Vec<StreamId> = segs.iter().map(|s| s.stream).collect();
    streams.sort();
    assert_eq!(streams, [1, 2]);
    a.free(y);
    a.free(z);
}

#[test]
fn oom_report_numbers_and_recovery() {
    let (a, raw) = host(Some(8 * MIB));
    // Seven 1 MiB tensors (small pool): four 2 MiB segments fill the device.
    let mut live: Vec<Allocation> = (0..7).map(|_| alloc(&a, MIB, 0)).collect();
    assert_eq!(raw.used(), 8 * MIB);
    let site = here();
    let err = a
        .allocate(2 * MIB, 0, site)
        .expect_err("needs a 20 MiB segment");
    assert_eq!(err.device, "emu:0");
    assert_eq!(
        (err.requested, err.rounded, err.segment_size),
        (2 * MIB, 2 * MIB, 20 * MIB)
    );
    assert_eq!(err.capacity, Some(8 * MIB));
    assert_eq!(err.allocated, 7 * MIB);
    assert_eq!(err.reserved, 8 * MIB);
    assert_eq!(err.reserved_free, MIB);
    assert_eq!(err.largest_free_block, MIB);
    assert_eq!(err.top_allocations.len(), 5);
    assert!(err
        .top_allocations
        .iter()
        .all(|t| t.size == MIB && t.requested == MIB));
    assert!(err
        .top_allocations
        .iter()
        .all(|t| t.site.file().ends_with("caching/tests.rs")));
    let s = a.stats();
    assert_eq!((s.num_ooms, s.num_alloc_retries), (1, 1));
    check(&a);

    // A request that fits the device in principle but not next to the live tensors.
    let err = a.allocate(12 * MIB, 0, site).expect_err("12 MiB > 8 MiB");
    let text = err.to_string();
    assert!(
        text.starts_with("Out of memory: tried to allocate 12.00 MiB"),
        "{text}"
    );
    assert!(text.contains("12582912 bytes requested"), "{text}");
    assert!(
        text.contains("8.00 MiB capacity, 7.00 MiB allocated by tensors"),
        "{text}"
    );
    assert!(
        text.contains("1.00 MiB reserved but free (largest free block 1.00 MiB)"),
        "{text}"
    );
    assert!(
        text.contains("Biggest live allocations: 5 allocations of 1.00 MiB at ")
            && text.contains("src/memory/alloc/caching/tests.rs:"),
        "{text}"
    );
    assert!(text.contains("(1048576 bytes requested each)."), "{text}");
    assert!(text.contains("larger than the whole device"), "{text}");
    assert_eq!(a.stats().num_ooms, 2);

    // Still usable: the free 1 MiB block is handed out, then everything is freed.
    let err = a
        .allocate(512, 3, site)
        .expect_err("device full, free block is on stream 0");
    assert_eq!(err.largest_free_block, MIB);
    assert!(err.to_string().contains("another stream or pool"), "{err}");
    live.push(alloc(&a, MIB, 0));
    assert_eq!(a.largest_free_block(), 0);
    check(&a);
    for x in live.drain(..) {
        a.free(x);
    }
    assert_eq!(a.stats().allocated_bytes.all.current, 0);
    // A new stream needs a new segment: the cache is released to make room.
    let big = alloc(&a, MIB, 9);
    assert_eq!(
        a.stats().num_alloc_retries,
        4,
        "cache released to make room"
    );
    assert_eq!(a.stats().segment.all.current, 1);
    assert_eq!(raw.used(), 2 * MIB);
    a.free(big);
    check(&a);
    a.empty_cache();
    assert_eq!(raw.used(), 0);
}

#[test]
fn oom_advice_depends_on_the_numbers() {
    // Plenty of live tensors, little cached: generic advice.
    let (a, _raw) = host(Some(8 * MIB));
    let live: Vec<Allocation> = (0..8).map(|_| alloc(&a, MIB - 512, 0)).collect();
    assert_eq!(a.stats().segment.all.current, 4);
    let err = a.allocate(MIB, 0, here()).expect_err("full");
    let text = err.to_string();
    assert_eq!(err.reserved_free, 4 * 1024);
    assert_eq!(err.segment_size, 2 * MIB);
    assert!(text.contains("reduce the batch size"), "{text}");
    assert!(text.contains("gradient accumulation"), "{text}");
    assert!(text.contains("mixed precision"), "{text}");
    for x in live {
        a.free(x);
    }

    // Every other 1 MiB tensor freed: 4 MiB free but only in 1 MiB pieces.
    let (a, _raw) = host(Some(8 * MIB));
    let mut live: Vec<Allocation> = (0..8).map(|_| alloc(&a, MIB, 0)).collect();
    let mut keep = Vec::new();
    for (i, x) in live.drain(..).enumerate() {
        if i % 2 == 0 {
            a.free(x);
        } else {
            keep.push(x);
        }
    }
    let err = a
        .allocate(12 * MIB / 2, 0, here())
        .expect_err("no 20 MiB segment fits");
    assert_eq!(err.reserved_free, 4 * MIB);
    let text = err.to_string();
    assert!(text.contains("20.00 MiB segments"), "{text}");
    // The same fragmentation with a request that could be served by a segment.
    let err = Box::new(OomReport {
        segment_size: 2 * MIB,
        rounded: 2 * MIB,
        ..(*err).clone()
    });
    let text = err.to_string();
    assert!(text.contains("fragmented"), "{text}");
    assert!(text.contains("empty_cache()"), "{text}");
    for x in keep {
        a.free(x);
    }
    check(&a);
}

#[test]
fn failed_device_alloc_releases_cache_and_retries() {
    let (a, raw) = host(Some(8 * MIB));
    // One small segment per stream fills the device.
    let xs: Vec<Allocation> = (0..4).map(|s| alloc(&a, 1000, s)).collect();
    assert_eq!(a.stats().segment.all.current, 4);
    for x in xs {
        a.free(x);
    }
    assert_eq!(a.stats().reserved_bytes.all.current, 8 * MIB as i64);
    // Stream 4 cannot reuse those blocks and the device is full: release + retry.
    let y = alloc(&a, 1000, 4);
    let s = a.stats();
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_ooms, 0);
    assert_eq!(s.segment.all.current, 1);
    assert_eq!(s.segment.all.freed, 4);
    assert_eq!(s.reserved_bytes.all.current, 2 * MIB as i64);
    assert_eq!(raw.used(), 2 * MIB);
    check(&a);
    a.free(y);
}

#[test]
fn huge_requests_fail_cleanly() {
    let (a, _raw) = host(None);
    let err = a.allocate(usize::MAX, 0, here()).expect_err("cannot round");
    assert_eq!(err.requested, usize::MAX);
    let err = a
        .allocate(usize::MAX / 2, 0, here())
        .expect_err("host cannot provide it");
    assert_eq!(err.capacity, None);
    assert!(err.to_string().contains("no fixed capacity"));
    assert_eq!(a.stats().num_ooms, 2);
    assert_eq!(a.stats().num_alloc_retries, 1);
    check(&a);
}

#[test]
fn peak_and_accumulated_resets() {
    let (a, _raw) = host(None);
    let x = alloc(&a, 4096, 0);
    let y = alloc(&a, 4096, 0);
    a.free(x);
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.peak, 8192);
    assert_eq!(s.allocated_bytes.all.current, 4096);
    a.reset_peak_stats();
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.peak, 4096);
    assert_eq!(s.allocation.all.peak, 1);
    assert_eq!(s.reserved_bytes.all.peak, 2 * MIB as i64);
    assert_eq!(s.allocated_bytes.all.allocated, 8192);
    a.reset_accumulated_stats();
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.allocated, 0);
    assert_eq!(s.allocated_bytes.all.freed, 0);
    assert_eq!(s.allocated_bytes.all.current, 4096);
    assert_eq!(s.allocation.all.current, 1);
    let z = alloc(&a, 8192, 0);
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.peak, 4096 + 8192);
    assert_eq!(s.allocated_bytes.all.allocated, 8192);
    a.free(y);
    a.free(z);
    assert_eq!(a.stats().allocated_bytes.all.freed, 4096 + 8192);
}

#[test]
fn segments_snapshot_records_sites() {
    let (a, _raw) = host(None);
    let site = here();
    let x = a.allocate(3000, 7, site).unwrap();
    let segs = a.segments();
    assert_eq!(segs.len(), 1);
    let seg = &segs[0];
    assert_eq!(
        (seg.pool, seg.stream, seg.total_size),
        (PoolKind::Small, 7, 2 * MIB)
    );
    assert_eq!((seg.allocated_size, seg.requested_size), (3072, 3000));
    assert_eq!(seg.blocks[0].state, BlockState::Active);
    assert_eq!(seg.blocks[0].site, Some(site));
    assert_eq!(seg.blocks[0].requested, 3000);
    assert_eq!(seg.blocks[1].state, BlockState::Inactive);
    a.free(x);
}

#[test]
fn summary_lists_metrics() {
    let (a, _raw) = host(Some(64 * MIB));
    let x = alloc(&a, 1000, 0);
    let text = a.summary();
    assert!(text.contains("emu:0"));
    assert!(text.contains("64.00 MiB"));
    for row in [
        "Allocated memory",
        "Reserved memory",
        "Non-releasable memory",
        "Allocations",
        "Reserved segments",
    ] {
        assert!(text.contains(row), "{row} missing:\n{text}");
    }
    assert!(text.contains("1.00 KiB"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() == 81), "{text}");
    a.free(x);
}

#[test]
#[should_panic(expected = "does not belong")]
fn freeing_into_the_wrong_allocator_panics() {
    let (a, _ra) = host(None);
    let (b, _rb) = host(None);
    let _keep = alloc(&b, 512, 0);
    let x = alloc(&a, 512, 0);
    b.free(x);
}

#[test]
fn two_thread_stress_ends_at_zero() {
    let (a, raw) = host(None);
    let a = Arc::new(a);
    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                let mut next = move || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut live: Vec<Allocation> = Vec::new();
                for _ in 0..3000 {
                    if live.len() < 40 && next() % 3 != 0 {
                        let r = next();
                        let bytes = match r % 10 {
                            0 => 0,
                            1 => (r >> 8) as usize % (12 * MIB),
                            2..=3 => (r >> 8) as usize % (3 * MIB),
                            _ => (r >> 8) as usize % (64 * KIB),
                        };
                        let stream = (next() % 3) as StreamId;
                        let x = a
                            .allocate(bytes, stream, Location::caller())
                            .expect("host memory");
                        assert!(x.size() >= x.requested());
                        live.push(x);
                    } else if !live.is_empty() {
                        let k = next() as usize % live.len();
                        a.free(live.swap_remove(k));
                    }
                    if next() % 500 == 0 {
                        a.empty_cache();
                    }
                }
                live
            })
        })
        .collect();
    // Survivors are freed by the main thread (allocations are Send).
    for h in handles {
        for x in h.join().unwrap() {
            a.free(x);
        }
    }
    check(&a);
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.current, 0);
    assert_eq!(s.allocation.all.current, 0);
    assert_eq!(s.requested_bytes.all.current, 0);
    assert_eq!(s.inactive_split.all.current, 0);
    assert!(s.allocation.all.allocated > 1000);
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
    assert_eq!(raw.used(), 0);
}
