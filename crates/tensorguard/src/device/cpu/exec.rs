//! The executor: the locks and the kernel call of one clean launch (Note
//! [Staging above the backends] in `ops/staging.rs`).

use smallvec::SmallVec;

use crate::device::holds::{hold_all, wait_until_free, Hold as Guard};
use crate::device::kernel::{is_clean, reads_output_first, Arg, KIn, KOut, Kernel};
use crate::device::Storage;
use crate::error::{Error, Result};
use crate::memory::alloc::Buffer;
use crate::shape::Layout;

fn internal(what: &str) -> Error {
    Error::invalid("launch", format!("internal error: {what}"))
}

/// Run `kernel` with the storages of `outs` write-locked and those of `ins`
/// read-locked (see Note [Lock order] in `device/storage.rs`). The launch
/// is clean: every operand in the dtype the kernel takes, no input on an
/// output's storage but an in-place op's first one (`ops::launch` staged
/// the rest, Note [Staging above the backends]). Runs on the calling
/// thread: the caller is the host for the cpu, a stream worker for an
/// asynchronous device.
///
/// For queued work (a stream worker): an operand written by a failed kernel
/// (poisoned) is not read: the outputs are poisoned with the same cause and
/// [`Error::Poisoned`] is returned (a kernel queued before the fault was
/// known).
pub(crate) fn execute_queued(kernel: &Kernel, outs: &[Arg<'_>], ins: &[Arg<'_>]) -> Result<()> {
    if let Some(p) = ins.iter().chain(outs).find_map(|a| a.storage.poisoned()) {
        let p = std::sync::Arc::clone(p);
        for o in outs {
            o.storage.poison(&p);
        }
        return Err(p.error(kernel.name()));
    }
    execute(kernel, outs, ins)
}

/// [`execute_queued`] without the poison check, for work launched inline
/// by the host, which checked its operands for poison itself (after
/// waiting for their pending writes). Inlined into its callers: the common
/// case goes to [`execute_simple`] without another frame.
#[inline(always)]
pub(crate) fn execute(kernel: &Kernel, outs: &[Arg<'_>], ins: &[Arg<'_>]) -> Result<()> {
    // no element to write: nothing to compute. Kernels may index a buffer at
    // a layout's offset, and an empty view can start past the end of its
    // storage (`select(0, 1)` of a `[2, 0]` tensor has offset 1).
    if nothing_to_write(outs) {
        return Ok(());
    }
    if let [_] = outs {
        if let Some(r) = execute_simple(kernel, outs, ins) {
            return r;
        }
    }
    execute_general(kernel, outs, ins)
}

/// Whether every output is empty (and there is one): the launch then has
/// no element to write. The one-output case, every op's, without a loop.
#[inline(always)]
fn nothing_to_write(outs: &[Arg<'_>]) -> bool {
    match outs {
        [] => false,
        [out] => empty(out),
        _ => outs.iter().all(empty),
    }
}

/// [`execute`] in general: any number of operands, each storage locked
/// once (write wins) in id order.
#[inline(never)]
fn execute_general(kernel: &Kernel, outs: &[Arg<'_>], ins: &[Arg<'_>]) -> Result<()> {
    // an elementwise in-place op reads its first input from the output
    // itself when it is exactly the output (`a.add_(b)`)
    if !is_clean(kernel, outs, ins) {
        return Err(internal(
            "a launch reached the executor unstaged (Note [Staging above the backends])",
        ));
    }
    let self_first = reads_output_first(kernel, outs, ins);
    let rest = &ins[usize::from(self_first)..];
    // 1. the lock set, sorted by storage id, write wins
    let mut set: SmallVec<[(u64, usize, bool); 6]> = SmallVec::new(); // (id, owner index, write)
    let entries = outs
        .iter()
        .map(|o| (o, true))
        .chain(ins.iter().map(|i| (i, false)));
    let mut owners: SmallVec<[&Arg<'_>; 6]> = SmallVec::new();
    for (t, write) in entries {
        let id = t.storage.id();
        match set.iter_mut().find(|e| e.0 == id) {
            Some(e) => e.2 |= write,
            None => {
                set.push((id, owners.len(), write));
                owners.push(t);
            }
        }
    }
    set.sort_unstable_by_key(|e| e.0);
    // 2. lock in order, never waiting while holding a lock (Note [Lends in
    // the lock order])
    let order: SmallVec<[(&Storage, bool); 6]> = set
        .iter()
        .map(|&(_, owner, write)| (&**owners[owner].storage, write))
        .collect();
    let mut guards: SmallVec<[(u64, Guard<'_>); 6]> = set
        .iter()
        .map(|e| e.0)
        .zip(hold_all(&order, kernel.name())?)
        .collect();

    // 3. split the guards into the kernel's views
    type Slot<'g> = (u64, Option<&'g mut [u8]>, Option<&'g [u8]>);
    let mut slots: SmallVec<[Slot<'_>; 6]> = guards
        .iter_mut()
        .map(|(id, g)| {
            Ok(match g {
                Guard::W(w) => (*id, Some(w.host_bytes_mut()?), None),
                Guard::R(r) => (*id, None, Some(r.host_bytes()?)),
            })
        })
        .collect::<Result<_>>()?;
    // each input's bytes, read through its layout broadcast to the
    // kernel's shape when needed
    let bases: SmallVec<[&[u8]; 3]> = rest
        .iter()
        .map(|i| {
            let id = i.storage.id();
            match slots.iter().find(|s| s.0 == id).and_then(|s| s.2) {
                Some(b) => Ok(b),
                None => Err(internal("an input storage is not locked for reading")),
            }
        })
        .collect::<Result<_>>()?;
    let bcast: SmallVec<[Option<Layout>; 3]> = rest
        .iter()
        .map(|i| broadcast_layout(i.bshape, i.layout))
        .collect();
    let kins: SmallVec<[KIn<'_>; 3]> = rest
        .iter()
        .zip(bases.iter().zip(&bcast))
        .map(|(i, (buf, b))| KIn {
            buf,
            layout: b.as_ref().unwrap_or(i.layout),
            dtype: i.want,
        })
        .collect();
    let mut kouts: SmallVec<[KOut<'_>; 2]> = SmallVec::new();
    for o in outs {
        let id = o.storage.id();
        match slots
            .iter_mut()
            .find(|s| s.0 == id)
            .and_then(|s| s.1.take())
        {
            Some(b) => kouts.push(KOut {
                buf: b,
                layout: o.layout,
                dtype: o.want,
            }),
            None => return Err(internal("two outputs of one op share a storage")),
        }
    }

    // 4. run
    super::run(kernel, &mut kouts, &kins, self_first)
}

// Note [Fresh outputs]
// ~~~~~~~~~~~~~~~~~~~~~
// An op's new output tensor is reachable only through the handle the op
// holds until it returns: no alias, no view, no weak reference, its storage
// referenced by that tensor alone (`Tensor::is_unique`, checked by
// `ops::launch`, which marks the output `Arg::fresh`). Uniqueness alone is
// not enough: a user's tensor with one handle can be shared by threads as
// `&Tensor`, so only outputs the op made itself qualify (`launch` with
// `inplace` false; an existing tensor written goes through
// `ops::launch_into`, never fresh). Inputs never qualify. Run inline by the cpu,
// the kernel then writes it without its write lock: no other thread can
// lock it, so the lock would only cost two atomic operations on every op.
// Queued work never takes this path (the task's own reference makes the
// storage shared, and the host may share the tensor before the work runs).

/// The common case without staging: one output, at most two other inputs
/// already in the dtype the kernel reads and not sharing the output's
/// storage (or a first input that *is* the output). Same locking rule as
/// [`execute`], with no collections: the (at most three) locks are put in
/// id order by three compare-and-swaps (one comparison for a fresh
/// output's two inputs: the output takes no lock), and the kernel's views
/// are built in fixed arrays; `None` when the case does not apply.
#[inline(never)]
fn execute_simple(kernel: &Kernel, outs: &[Arg<'_>], ins: &[Arg<'_>]) -> Option<Result<()>> {
    let [out] = outs else { return None };
    // `ops::launch` staged what a kernel cannot take as it is (Note
    // [Staging above the backends]): its check is not repeated here
    debug_assert!(
        is_clean(kernel, outs, ins),
        "a launch reached the executor unstaged"
    );
    let oid = out.storage.id();
    // a fresh output is no input's storage (Note [Fresh outputs])
    let self_first = !out.fresh && reads_output_first(kernel, outs, ins);
    let rest = &ins[usize::from(self_first)..];
    let (a, b) = match rest {
        [] => (None, None),
        [a] => (Some(a), None),
        [a, b] => (Some(a), Some(b)),
        _ => return None,
    };
    let aid = a.map_or(u64::MAX, |a| a.storage.id());
    // a second input on the first one's storage is read under its lock
    let b_own = b.filter(|b| b.storage.id() != aid);
    let bid = b_own.map_or(u64::MAX, |b| b.storage.id());
    let mut write = None;
    let (mut ga, mut gb) = (None, None);
    // Note [Lock order]: (id, which) for the output (0; none for a fresh
    // output: Note [Fresh outputs]) and each distinct input (1, 2); absent
    // entries have id u64::MAX and sort last
    let mut order = [
        (if out.fresh { u64::MAX } else { oid }, 0u8),
        (aid, 1),
        (bid, 2),
    ];
    if order[0].0 > order[1].0 {
        order.swap(0, 1);
    }
    if order[1].0 > order[2].0 {
        order.swap(1, 2);
    }
    if order[0].0 > order[1].0 {
        order.swap(0, 1);
    }
    // each lock only if it is free now; otherwise give them all back and
    // wait for that one (Note [Lends in the lock order])
    'lock: loop {
        for (id, which) in order {
            if id == u64::MAX {
                break;
            }
            let (storage, taken) = match which {
                0 => {
                    write = out.storage.data.try_write();
                    (&out.storage, write.is_some())
                }
                1 => {
                    let a = a?;
                    ga = a.storage.data.try_read();
                    (&a.storage, ga.is_some())
                }
                _ => {
                    let b = b_own?;
                    gb = b.storage.data.try_read();
                    (&b.storage, gb.is_some())
                }
            };
            if !taken {
                (write, ga, gb) = (None, None, None);
                if let Err(e) = wait_until_free(storage, which == 0, kernel.name()) {
                    return Some(Err(e));
                }
                continue 'lock;
            }
        }
        break;
    }
    let written = match &mut write {
        Some(w) => w.host_bytes_mut(),
        // SAFETY: Note [Fresh outputs]: nothing but this call can reach the
        // output's storage (the op's new tensor is its only handle and has
        // not left the calling thread), so no lock is held or taken on it
        // while this exclusive borrow lives, and it ends with this call.
        None if out.fresh => unsafe { &mut *out.storage.data.data_ptr() }.host_bytes_mut(),
        None => return None,
    };
    let mut kout = [KOut {
        buf: match written {
            Ok(w) => w,
            Err(e) => return Some(Err(e)),
        },
        layout: out.layout,
        dtype: out.want,
    }];
    // an input's view: its locked bytes and layout (broadcast ones are
    // built out of line, below)
    let Some(a) = a else {
        return Some(super::run(kernel, &mut kout, &[], self_first));
    };
    let abuf = match ga.as_deref().map(Buffer::host_bytes) {
        Some(Ok(buf)) => buf,
        Some(Err(e)) => return Some(Err(e)),
        None => return None,
    };
    let ka = KIn {
        buf: abuf,
        layout: a.layout,
        dtype: a.want,
    };
    let Some(b) = b else {
        if needs_broadcast(a) {
            return Some(run_broadcast(kernel, &mut kout, [ka], [a], self_first));
        }
        return Some(super::run(kernel, &mut kout, &[ka], self_first));
    };
    let bbuf = match gb.as_deref().map(Buffer::host_bytes) {
        Some(Ok(buf)) => buf,
        Some(Err(e)) => return Some(Err(e)),
        // on the first input's storage, under its lock
        None => abuf,
    };
    let kb = KIn {
        buf: bbuf,
        layout: b.layout,
        dtype: b.want,
    };
    if needs_broadcast(a) || needs_broadcast(b) {
        return Some(run_broadcast(
            kernel,
            &mut kout,
            [ka, kb],
            [a, b],
            self_first,
        ));
    }
    Some(super::run(kernel, &mut kout, &[ka, kb], self_first))
}

/// Whether `arg` has no element: a dim of 0 (one compare per dim, where
/// the product of the dims would multiply).
#[inline(always)]
// `contains` unrolls its search for wide slices: 29 instructions more per
// tiny op than this loop over a shape's few dims (callgrind, tiny_chain)
#[allow(clippy::manual_contains)]
fn empty(arg: &Arg<'_>) -> bool {
    arg.layout.shape.iter().any(|&d| d == 0)
}

/// Whether the kernel reads `arg` broadcast to a larger shape.
#[inline]
fn needs_broadcast(arg: &Arg<'_>) -> bool {
    reads_broadcast(arg.bshape, arg.layout)
}

/// Whether an operand of `layout` read as `bshape` is broadcast (read in a
/// shape other than its own).
#[inline]
fn reads_broadcast(bshape: Option<&[usize]>, layout: &Layout) -> bool {
    bshape.is_some_and(|s| !crate::shape::same(s, &layout.shape))
}

/// `layout` broadcast to `bshape` when the operand is read broadcast.
fn broadcast_layout(bshape: Option<&[usize]>, layout: &Layout) -> Option<Layout> {
    bshape
        .filter(|_| reads_broadcast(bshape, layout))
        .map(|s| layout.broadcast_to(s))
}

/// [`super::run`] with the inputs read through their broadcast layouts
/// (out of line: every same-shape op would carry the layouts otherwise).
#[inline(never)]
fn run_broadcast<const N: usize>(
    kernel: &Kernel,
    kout: &mut [KOut<'_>],
    kins: [KIn<'_>; N],
    args: [&Arg<'_>; N],
    self_first: bool,
) -> Result<()> {
    let layouts: [Option<Layout>; N] =
        std::array::from_fn(|k| broadcast_layout(args[k].bshape, args[k].layout));
    let kins: [KIn<'_>; N] = std::array::from_fn(|k| KIn {
        buf: kins[k].buf,
        layout: layouts[k].as_ref().unwrap_or(kins[k].layout),
        dtype: kins[k].dtype,
    });
    super::run(kernel, kout, &kins, self_first)
}
