//! Threads: `Tensor` is `Send + Sync`, every in-place op is atomic (no lost
//! updates), ops that lock two storages in opposite orders never deadlock,
//! and a mixed stress test through views and aliases ends at an exactly
//! computable state; kernels split over the pool give the same bits as on
//! one thread. Each test is written once and run on every device
//! (`test_device!`): on an asynchronous device the ops of all threads queue
//! on one stream and the same exact results must come out.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tensorguard::{DType, Device, Result, Tensor};

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tensor>();
    assert_send_sync::<tensorguard::Error>();
    assert_send_sync::<Device>();
};

/// Run `f` on a helper thread and fail (instead of hanging) if it does not
/// finish within `secs` seconds.
fn with_deadline<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let r = f();
        let _ = tx.send(r);
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish in {secs} s: deadlock?"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("worker thread panicked"),
    }
}

common::test_device!(article_race_with_alias_no_lost_updates);

fn article_race_with_alias_no_lost_updates(dev: &Device) -> Result<()> {
    let dev = *dev;
    let shared = Tensor::ones([1000], DType::F32, &dev)?;
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let mine = shared.alias();
            thread::spawn(move || -> Result<()> {
                for _ in 0..1000 {
                    mine.add_(1.0)?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread panicked")?;
    }
    assert_eq!(shared.to_vec::<f32>()?, vec![10001.0; 1000]);
    assert_eq!(shared.version(), 10_000);
    Ok(())
}

common::test_device!(article_race_with_scope_no_lost_updates);

fn article_race_with_scope_no_lost_updates(dev: &Device) -> Result<()> {
    let dev = *dev;
    let shared = Tensor::ones([1000], DType::F32, &dev)?;
    thread::scope(|s| -> Result<()> {
        let hs: Vec<_> = (0..10)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    for _ in 0..1000 {
                        shared.add_(1.0)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().expect("thread panicked")?;
        }
        Ok(())
    })?;
    assert_eq!(shared.to_vec::<f32>()?, vec![10001.0; 1000]);
    assert_eq!(shared.version(), 10_000);
    Ok(())
}

common::test_device!(race_on_int_tensor_with_tensor_operand);

fn race_on_int_tensor_with_tensor_operand(dev: &Device) -> Result<()> {
    let dev = *dev;
    let shared = Tensor::zeros([257], DType::I64, &dev)?;
    let one = Tensor::ones([257], DType::I64, &dev)?;
    thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..500 {
                    shared.add_(&one).expect("add_");
                }
            });
        }
    });
    assert_eq!(shared.to_vec::<i64>()?, vec![4000; 257]);
    assert_eq!(shared.version(), 4000);
    assert_eq!(one.version(), 0);
    Ok(())
}

common::test_device!(opposite_lock_orders_never_deadlock);

fn opposite_lock_orders_never_deadlock(dev: &Device) -> Result<()> {
    let dev = *dev;
    // a <- clamp(a + b, 0, 1) and b <- clamp(b + a, 0, 1) from two threads,
    // starting at a = 0, b = 1. Whatever the interleaving, the values only
    // grow and are clamped, and a's first add makes it >= 1, so both end at
    // exactly 1 in every element.
    let (a, b) = with_deadline(120, move || -> Result<(Tensor, Tensor)> {
        let a = Tensor::zeros([64, 64], DType::F32, &dev)?;
        let b = Tensor::ones([64, 64], DType::F32, &dev)?;
        let (a1, b1) = (a.alias(), b.alias());
        let (a2, b2) = (a.alias(), b.alias());
        let t1 = thread::spawn(move || -> Result<()> {
            for _ in 0..1000 {
                a1.add_(&b1)?;
                a1.clamp_(0.0, 1.0)?;
            }
            Ok(())
        });
        let t2 = thread::spawn(move || -> Result<()> {
            for _ in 0..1000 {
                b2.add_(&a2)?;
                b2.clamp_(0.0, 1.0)?;
            }
            Ok(())
        });
        t1.join().expect("thread 1 panicked")?;
        t2.join().expect("thread 2 panicked")?;
        Ok((a, b))
    })?;
    for t in [&a, &b] {
        assert_eq!(t.to_vec2::<f32>()?, vec![vec![1.0; 64]; 64]);
        assert_eq!(t.version(), 2000);
    }
    Ok(())
}

common::test_device!(opposite_lock_orders_plain_add_never_deadlock);

fn opposite_lock_orders_plain_add_never_deadlock(dev: &Device) -> Result<()> {
    let dev = *dev;
    // The literal `a.add_(&b)` / `b.add_(&a)` pair; zeros stay exactly zero.
    let (a, b) = with_deadline(120, move || -> Result<(Tensor, Tensor)> {
        let a = Tensor::zeros([128], DType::F64, &dev)?;
        let b = Tensor::zeros([128], DType::F64, &dev)?;
        thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..1000 {
                    a.add_(&b).expect("a.add_(&b)");
                }
            });
            s.spawn(|| {
                for _ in 0..1000 {
                    b.add_(&a).expect("b.add_(&a)");
                }
            });
        });
        Ok((a, b))
    })?;
    assert_eq!(a.to_vec::<f64>()?, vec![0.0; 128]);
    assert_eq!(b.to_vec::<f64>()?, vec![0.0; 128]);
    assert_eq!(a.version(), 1000);
    assert_eq!(b.version(), 1000);
    Ok(())
}

common::test_device!(copy_between_tensors_in_both_directions_never_deadlocks);

fn copy_between_tensors_in_both_directions_never_deadlocks(dev: &Device) -> Result<()> {
    let dev = *dev;
    let (a, b) = with_deadline(120, move || -> Result<(Tensor, Tensor)> {
        let a = Tensor::full([100], 3.0, DType::F32, &dev)?;
        let b = Tensor::full([100], 3.0, DType::F32, &dev)?;
        thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..1000 {
                    a.copy_(&b).expect("a.copy_(&b)");
                }
            });
            s.spawn(|| {
                for _ in 0..1000 {
                    b.copy_(&a).expect("b.copy_(&a)");
                }
            });
        });
        Ok((a, b))
    })?;
    assert_eq!(a.to_vec::<f32>()?, vec![3.0; 100]);
    assert_eq!(b.to_vec::<f32>()?, vec![3.0; 100]);
    Ok(())
}

const THREADS: usize = 16;
const ITERS: usize = 50;
const N: usize = 16;

common::test_device!(stress_mixed_inplace_ops_exact_result);

fn stress_mixed_inplace_ops_exact_result(dev: &Device) -> Result<()> {
    let dev = *dev;
    // `base` [16, 16] is written by every thread through itself, an alias
    // and several views; `fills` rows are filled by their own thread;
    // `dst` is copied into from a constant `src`; `acc` counts with a
    // tensor operand that is itself a view of `src`.
    let base = Tensor::zeros([N, N], DType::F32, &dev)?;
    let fills = Tensor::zeros([THREADS, 8], DType::F32, &dev)?;
    let src = Tensor::arange(0.0, N as f64, &dev)?;
    let dst = Tensor::zeros([THREADS, N], DType::F32, &dev)?;
    let acc = Tensor::zeros([N], DType::F32, &dev)?;
    let ones = Tensor::ones([N], DType::F32, &dev)?;

    let result = with_deadline(300, {
        let (base, fills, src, dst, acc, ones) = (
            base.alias(),
            fills.alias(),
            src.alias(),
            dst.alias(),
            acc.alias(),
            ones.alias(),
        );
        move || -> Result<()> {
            thread::scope(|s| -> Result<()> {
                let hs: Vec<_> = (0..THREADS)
                    .map(|i| {
                        let (base, fills, src, dst, acc, ones) =
                            (&base, &fills, &src, &dst, &acc, &ones);
                        s.spawn(move || -> Result<()> {
                            let alias = base.alias();
                            let row = base.select(0, i as isize)?;
                            let left = base.slice(1, ..8)?;
                            let right = base.narrow(1, 8, 8)?;
                            let bt = base.t()?;
                            for k in 0..ITERS {
                                row.add_(1.0)?; // +1 on row i
                                bt.add_(1.0)?; // +1 everywhere
                                base.add_(3.0)?; // +3 ...
                                alias.sub_(2.0)?; // ... -2 everywhere
                                base.mul_(1.0)?; // no change
                                left.add_(&ones.narrow(0, 0, 8)?)?; // +1 on cols 0..8
                                right.sub_(&ones.narrow(0, 8, 8)?)?; // -1 on cols 8..16
                                base.view([-1])?.mul_(1)?; // no change
                                fills.select(0, i as isize)?.fill_(i as f64)?;
                                dst.select(0, i as isize)?.copy_(src)?;
                                acc.add_(&src.unsqueeze(0)?.select(0, 0)?)?;
                                if k % 10 == 0 {
                                    // concurrent readers see whole ops
                                    let _ = base.sum()?;
                                    let _ = base.t()?.contiguous()?;
                                }
                            }
                            Ok(())
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().expect("stress thread panicked")?;
                }
                Ok(())
            })
        }
    });
    result?;

    let t = THREADS as f32;
    let it = ITERS as f32;
    let got = base.to_vec2::<f32>()?;
    for (r, row) in got.iter().enumerate() {
        for (c, &v) in row.iter().enumerate() {
            let col_term = if c < 8 { 1.0 } else { -1.0 };
            // own row: +1 per iteration; everyone: +1 (t), +3 -2, +/-1
            let want = it + t * it * (1.0 + 1.0 + col_term);
            assert_eq!(v, want, "base[{r}][{c}]");
        }
    }
    // 8 in-place ops on base's storage per iteration per thread
    assert_eq!(base.version(), (THREADS * ITERS * 8) as u64);
    assert_eq!(
        fills.to_vec2::<f32>()?,
        (0..THREADS).map(|i| vec![i as f32; 8]).collect::<Vec<_>>()
    );
    assert_eq!(fills.version(), (THREADS * ITERS) as u64);
    let src_v: Vec<f32> = (0..N).map(|i| i as f32).collect();
    assert_eq!(dst.to_vec2::<f32>()?, vec![src_v.clone(); THREADS]);
    assert_eq!(dst.version(), (THREADS * ITERS) as u64);
    assert_eq!(
        acc.to_vec::<f32>()?,
        src_v.iter().map(|x| x * t * it).collect::<Vec<_>>()
    );
    assert_eq!(acc.version(), (THREADS * ITERS) as u64);
    assert_eq!(src.version(), 0);
    assert_eq!(ones.version(), 0);
    Ok(())
}

common::test_device!(many_threads_write_disjoint_views_of_one_base);

fn many_threads_write_disjoint_views_of_one_base(dev: &Device) -> Result<()> {
    let dev = *dev;
    let base = Tensor::zeros([THREADS, 100], DType::I64, &dev)?;
    thread::scope(|s| {
        for i in 0..THREADS {
            let base = &base;
            s.spawn(move || {
                let row = base.select(0, i as isize).expect("select");
                for _ in 0..200 {
                    row.add_(i as i64).expect("add_");
                }
            });
        }
    });
    let got = base.to_vec2::<i64>()?;
    for (i, row) in got.iter().enumerate() {
        assert_eq!(row, &vec![200 * i as i64; 100], "row {i}");
    }
    assert_eq!(base.version(), (THREADS * 200) as u64);
    Ok(())
}

common::test_device!(readers_never_see_a_half_written_tensor);

fn readers_never_see_a_half_written_tensor(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = Tensor::zeros([4096], DType::F32, &dev)?;
    let mut seen = Vec::new();
    thread::scope(|s| {
        s.spawn(|| {
            for k in 0..500 {
                t.fill_(if k % 2 == 0 { 1.0 } else { 2.0 }).expect("fill_");
            }
        });
        for _ in 0..500 {
            let v = t.to_vec::<f32>().expect("to_vec");
            assert!(
                v.iter().all(|&x| x == v[0]),
                "torn read: {} and {}",
                v[0],
                v[4095]
            );
            seen.push(v[0]);
        }
    });
    assert!(seen.iter().all(|&x| x == 0.0 || x == 1.0 || x == 2.0));
    assert_eq!(t.to_vec::<f32>()?, vec![2.0; 4096]);
    assert_eq!(t.version(), 500);
    Ok(())
}

common::test_device!(reductions_split_by_elements_read_match_one_lane);
/// A reduction splits its outputs over the pool by the elements it reads:
/// three sums of 300,000 elements run on three threads' chunks. Each must be
/// the very bits of the same row reduced alone (one output: no split).
fn reductions_split_by_elements_read_match_one_lane(dev: &Device) -> Result<()> {
    let (rows, cols) = (3usize, 300_000usize);
    // a bump around element 450,000 (row 1): exp(-(i/1000 - 450)^2)
    let t = Tensor::arange(0, (rows * cols) as i64, dev)?
        .to_dtype(DType::F32)?
        .mul(1e-3)?
        .sub(450.0)?;
    let x = t.mul(&t)?.neg()?.exp()?.view([rows, cols])?;
    let sums = x.sum_dim([-1], false)?.to_vec::<f32>()?;
    let maxes = x.amax([-1], false)?.to_vec::<f32>()?;
    let args = x.argmax_dim(-1, false)?.to_vec::<i64>()?;
    // down the columns: 300,000 outputs of 3 elements each
    let col_sums = x.sum_dim([0], false)?.to_vec::<f32>()?;
    for r in 0..rows {
        let row = x.narrow(0, r as isize, 1)?;
        assert_eq!(
            sums[r].to_bits(),
            row.sum()?.item::<f32>()?.to_bits(),
            "row {r}"
        );
        assert_eq!(maxes[r], row.max()?.item::<f32>()?);
        assert_eq!(args[r], row.argmax()?.item::<i64>()?);
    }
    let v = x.to_vec::<f32>()?;
    for c in [0, 1, cols / 2, cols - 1] {
        let want = (0..rows).map(|r| v[r * cols + c] as f64).sum::<f64>() as f32;
        assert_eq!(col_sums[c], want, "column {c}");
    }
    Ok(())
}

common::test_device!(a_full_sum_split_over_the_pool_gives_the_same_bits_every_time);
/// A sum over all of 4M f64 (split over the pool in chunks) adds its
/// chunks' partials in one order: the same bits on every run, however the
/// pool split the work. Large values every 997 elements make the order of
/// the additions visible in the last bits (alternating +-1e15 among small
/// values). On the cpu the sums run in a
/// pool of 8 threads (32 chunks), more threads than this machine's cores,
/// so work stealing splits them differently from run to run.
fn a_full_sum_split_over_the_pool_gives_the_same_bits_every_time(dev: &Device) -> Result<()> {
    let n = 1usize << 22;
    let v: Vec<f64> = (0..n)
        .map(|i| {
            if i % 997 == 0 {
                // alternating signs: partials of very different sizes
                if (i / 997) % 2 == 0 {
                    1e15 + i as f64
                } else {
                    -1e15 + 0.3
                }
            } else {
                (i % 7) as f64 * 1e-3
            }
        })
        .collect();
    let x = Tensor::from_vec(v, [n], dev)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(8)
        .build()
        .expect("a pool of 8 threads");
    let sum = || pool.install(|| x.sum()?.item::<f64>().map(f64::to_bits));
    let first = sum()?;
    for run in 0..10 {
        assert_eq!(sum()?, first, "run {run}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Lends and the lock order (Note [Lends in the lock order]; issue 51)
// ---------------------------------------------------------------------------

/// A lend of `b` whose closure writes `a` (created first, so before `b` in
/// the lock order), against `b.add_(&a)` on another thread: deadlocked in
/// 3 runs of 3 within 3 s before ops stopped waiting while holding a lock.
#[test]
fn a_lend_and_an_op_on_another_thread_do_not_deadlock() {
    with_deadline(120, || {
        let a = Tensor::zeros([1000], DType::F32, &Device::Cpu).unwrap();
        let b = Tensor::zeros([1000], DType::F32, &Device::Cpu).unwrap();
        let rounds = 3000;
        let (a1, b1) = (a.alias(), b.alias());
        let lender = thread::spawn(move || -> Result<()> {
            for _ in 0..rounds {
                b1.with_host_data(|_: &[f32]| a1.add_(1.0).map(|_| ()))??;
            }
            Ok(())
        });
        let (a2, b2) = (a.alias(), b.alias());
        let adder = thread::spawn(move || -> Result<()> {
            for _ in 0..rounds {
                b2.add_(&a2)?;
            }
            Ok(())
        });
        lender.join().expect("the lending thread").unwrap();
        adder.join().expect("the adding thread").unwrap();
        // every add_ of 1.0 to `a` happened, each atomically
        assert!(a
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|&x| x == rounds as f32));
        let b = b.to_vec::<f32>().unwrap();
        assert!(b.windows(2).all(|w| w[0] == w[1]), "b.add_(&a) is atomic");
        assert!(b[0] >= 0.0 && b[0] <= (rounds * rounds) as f32);
    });
}

/// Two closures, each lending what the other's op needs, would wait for
/// each other forever: one of the two ops fails with an error that says
/// so, the other then goes through.
#[test]
fn two_lends_waiting_for_each_other_fail_one_op_instead_of_hanging() {
    with_deadline(60, || {
        for round in 0..20 {
            let a = Tensor::zeros([64], DType::F32, &Device::Cpu).unwrap();
            let b = Tensor::zeros([64], DType::F32, &Device::Cpu).unwrap();
            let both_lend = std::sync::Arc::new(std::sync::Barrier::new(2));
            let run =
                |lent: Tensor, other: Tensor, both_lend: std::sync::Arc<std::sync::Barrier>| {
                    thread::spawn(move || -> Result<()> {
                        lent.with_host_data(|_: &[f32]| {
                            both_lend.wait();
                            other.add_(1.0).map(|_| ())
                        })?
                    })
                };
            let t1 = run(b.alias(), a.alias(), both_lend.clone());
            let t2 = run(a.alias(), b.alias(), both_lend);
            let results = [t1.join().expect("thread 1"), t2.join().expect("thread 2")];
            let failed: Vec<String> = results
                .iter()
                .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
                .collect();
            assert_eq!(
                failed.len(),
                1,
                "round {round}: exactly one op fails: {failed:?}"
            );
            assert!(
                failed[0].contains("deadlock") && failed[0].contains("with_host_data"),
                "round {round}: {}",
                failed[0]
            );
            let sum =
                a.sum().unwrap().item::<f32>().unwrap() + b.sum().unwrap().item::<f32>().unwrap();
            assert_eq!(sum, 64.0, "round {round}: the other op went through");
        }
    });
}
