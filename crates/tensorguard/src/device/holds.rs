//! Taking storages' locks without waiting while holding one: Note [Lock
//! order] and Note [Lends in the lock order].

use smallvec::SmallVec;

use crate::device::storage::{lending_here, lent_ids, Storage};
use crate::error::{Error, Result};
use crate::memory::alloc::biased::{ReadGuard, WriteGuard};
use crate::memory::alloc::Buffer;

// Note [Lends in the lock order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Ops take their storages' locks in id order, but a lend
// (`with_host_data`) holds one across a closure that may run ops on other
// tensors, whose locks may come before the lent one: thread 1 lends `b`
// and, inside, writes `a`; thread 2 runs `b.add_(&a)`, holds `a` and waits
// for `b`. Waiting in id order while holding a lock deadlocked there
// (issue 51). So nothing waits for a lock while it holds another: an op
// takes its locks in id order, each only if it is free now; when one is
// not, it gives back those it took, waits (holding none) until that one
// is free, and starts again. Thread 2 then waits for the lend with `a`
// free, and thread 1's write goes through.
//
// A thread inside a lend still holds the lent lock while it waits. Two
// such threads can wait for each other (each lends what the other's op
// needs), and nothing but one of them giving up can end it. So a lending
// thread that must wait writes down, in one table under one mutex, what it
// lends and what it waits for, after following the chain of lending
// waiters from what it wants: if the chain comes back to what it lends,
// the op fails with an error that says so instead of waiting. The table
// is read and written under its mutex, so of two threads closing a cycle
// the second sees the first. Threads that lend nothing never touch it.

/// A storage lock held for one op (a read or a write hold).
pub(crate) enum Hold<'a> {
    R(ReadGuard<'a, Buffer>),
    W(WriteGuard<'a, Buffer>),
}

impl Hold<'_> {
    /// The locked buffer.
    pub(crate) fn buf(&self) -> &Buffer {
        match self {
            Hold::R(g) => g,
            Hold::W(g) => g,
        }
    }

    /// The buffer of a write hold; an internal error for a read hold.
    pub(crate) fn buf_mut(&mut self) -> Result<&mut Buffer> {
        match self {
            Hold::W(g) => Ok(g),
            Hold::R(_) => Err(Error::invalid(
                "copy_",
                "internal error: a storage locked for reading was to be written",
            )),
        }
    }
}

/// The locks of `set` (a storage, and whether it is written), already
/// sorted by storage id with each storage once: taken in that order, each
/// only if it is free now; when one is not, those taken are given back,
/// this thread waits for that one holding nothing, and starts again (Note
/// [Lends in the lock order]). The holds come back in `set`'s order.
pub(crate) fn hold_all<'a>(
    set: &[(&'a Storage, bool)],
    op: &'static str,
) -> Result<SmallVec<[Hold<'a>; 6]>> {
    let mut held = SmallVec::new();
    'lock: loop {
        for &(storage, write) in set {
            match try_hold(storage, write) {
                Some(h) => held.push(h),
                None => {
                    held.clear();
                    wait_until_free(storage, write, op)?;
                    continue 'lock;
                }
            }
        }
        return Ok(held);
    }
}

/// `storage`'s lock, for writing when `write`, if it is free now.
#[inline]
pub(crate) fn try_hold(storage: &Storage, write: bool) -> Option<Hold<'_>> {
    if write {
        storage.data.try_write().map(Hold::W)
    } else {
        storage.data.try_read().map(Hold::R)
    }
}

/// Waits, holding no storage lock but this thread's lends, until
/// `storage`'s lock can be had in that mode; gives it back at once (the
/// caller starts its locking again: Note [Lends in the lock order]). A
/// thread that lends fails instead when its wait would close a cycle of
/// lending threads.
#[inline(never)]
pub(crate) fn wait_until_free(storage: &Storage, write: bool, op: &'static str) -> Result<()> {
    let _waiting = if lending_here() {
        Some(LenderWait::enter(storage.id(), op)?)
    } else {
        None
    };
    if write {
        drop(storage.data.write());
    } else {
        drop(storage.data.read());
    }
    Ok(())
}

/// `storage`'s lock for reading, waiting for it as
/// [`wait_until_free`] does (for a host read by `op`).
pub(crate) fn hold_read<'a>(
    storage: &'a Storage,
    op: &'static str,
) -> Result<ReadGuard<'a, Buffer>> {
    loop {
        if let Some(g) = storage.data.try_read() {
            return Ok(g);
        }
        wait_until_free(storage, false, op)?;
    }
}

/// `storage`'s lock for writing, waiting for it as [`wait_until_free`]
/// does (for a host write by `op`).
pub(crate) fn hold_write<'a>(
    storage: &'a Storage,
    op: &'static str,
) -> Result<WriteGuard<'a, Buffer>> {
    loop {
        if let Some(g) = storage.data.try_write() {
            return Ok(g);
        }
        wait_until_free(storage, true, op)?;
    }
}

/// One lending thread's wait (Note [Lends in the lock order]).
struct Waiter {
    thread: std::thread::ThreadId,
    lends: SmallVec<[u64; 2]>,
    wants: u64,
}

static WAITERS: parking_lot::Mutex<Vec<Waiter>> = parking_lot::Mutex::new(Vec::new());

/// A lending thread's entry in [`WAITERS`] while it waits.
struct LenderWait(std::thread::ThreadId);

impl LenderWait {
    /// Writes down that this thread, lending what it lends, waits for
    /// storage `wants`; fails when a chain of lending waiters leads from
    /// `wants` back to this thread's lends.
    fn enter(wants: u64, op: &'static str) -> Result<LenderWait> {
        let thread = std::thread::current().id();
        let lends = lent_ids();
        let mut waiters = WAITERS.lock();
        // what the waits reachable from `wants` wait for (a storage read-lent
        // by several threads has several lenders)
        let mut seen: SmallVec<[u64; 4]> = SmallVec::from_slice(&[wants]);
        let mut next = 0;
        while let Some(&x) = seen.get(next) {
            next += 1;
            if lends.contains(&x) {
                return Err(cycle_error(op, wants, &lends, x != wants));
            }
            for w in waiters.iter().filter(|w| w.lends.contains(&x)) {
                if !seen.contains(&w.wants) {
                    seen.push(w.wants);
                }
            }
        }
        waiters.push(Waiter {
            thread,
            lends,
            wants,
        });
        Ok(LenderWait(thread))
    }
}

impl Drop for LenderWait {
    fn drop(&mut self) {
        let mut waiters = WAITERS.lock();
        if let Some(i) = waiters.iter().position(|w| w.thread == self.0) {
            waiters.swap_remove(i);
        }
    }
}

/// The error of a lending thread whose wait would close a cycle; `longer`
/// when the cycle runs through more than one other lending thread.
fn cycle_error(op: &'static str, wants: u64, lends: &[u64], longer: bool) -> Error {
    let lent = lends
        .iter()
        .map(|id| format!("storage {id}"))
        .collect::<Vec<_>>()
        .join(", ");
    let who = if longer {
        "other threads' `with_host_data` closures lend while they wait, one for another, for"
    } else {
        "another thread's `with_host_data` closure lends while it waits for"
    };
    Error::invalid(
        op,
        format!(
            "this op runs inside a `with_host_data` closure that lends {lent}, and needs storage {wants}, which {who} this thread's lend. Each closure would wait for the other: a deadlock. Copy what the closure needs before lending (`t.to_vec()`, `t.clone()`), or run the op after `with_host_data` returns."
        ),
    )
}
