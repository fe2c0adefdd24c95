//! Heap allocations per op on the hot path (the performance issue's "no
//! per-op heap allocation beyond the output storage"): a counting global
//! allocator, counting only on the thread that asks for it, around tiny ops
//! whose caches are warm. These assert behaviour (how many allocations),
//! never time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use tensorguard::{autograd, DType, Device, Tensor};

struct Counting;

thread_local! {
    /// Allocations made on this thread while counting is on (`None`: off).
    static COUNT: Cell<Option<usize>> = const { Cell::new(None) };
}

fn note() {
    // `try_with`: the allocator may run while this thread's locals are gone
    let _ = COUNT.try_with(|c| {
        if let Some(n) = c.get() {
            c.set(Some(n + 1));
        }
    });
}

// SAFETY: every call is forwarded to `System` unchanged; counting touches
// only a const-initialised thread-local `Cell` (no allocation, no
// destructor), so the allocator never re-enters itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations `f` makes on this thread (after one untimed warm-up
/// call, so lazily made state is not counted), the least of a few runs.
fn allocations<R>(mut f: impl FnMut() -> R) -> usize {
    drop(f());
    (0..5)
        .map(|_| {
            COUNT.with(|c| c.set(Some(0)));
            let r = f();
            let n = COUNT.with(|c| c.replace(None)).unwrap_or(0);
            drop(r);
            n
        })
        .min()
        .unwrap_or(0)
}

/// An op's output is one `TensorImpl` block and one `Storage` block, which
/// come from the blocks the thread freed (Note [Recycled blocks] in
/// `memory/alloc/recycle.rs`), and its memory from the caching allocator's
/// cache: once warm, no heap allocation at all.
const OUTPUT: usize = 0;

#[test]
fn tiny_ops_allocate_only_their_output() {
    let cpu = Device::Cpu;
    let a = Tensor::ones([1], DType::F32, &cpu).unwrap();
    let b = Tensor::ones([1], DType::F32, &cpu).unwrap();
    assert_eq!(allocations(|| a.add(&b).unwrap()), OUTPUT, "a.add(&b)");
    assert_eq!(allocations(|| a.mul(2.0).unwrap()), OUTPUT, "a.mul(2.0)");
    assert_eq!(allocations(|| a.exp().unwrap()), OUTPUT, "a.exp()");
    // in place: no output to make
    assert_eq!(allocations(|| a.add_(&b).unwrap()), 0, "a.add_(&b)");
    // broadcasting and a strided view: still only the output
    let row = Tensor::ones([4, 3], DType::F32, &cpu).unwrap();
    let col = Tensor::ones([4, 1], DType::F32, &cpu).unwrap();
    assert_eq!(
        allocations(|| row.add(&col).unwrap()),
        OUTPUT,
        "broadcast add"
    );
    let t = row.t().unwrap();
    assert_eq!(allocations(|| t.mul(&t).unwrap()), OUTPUT, "strided mul");
    // under no_grad a requires-grad input costs nothing more
    let x = Tensor::ones([1], DType::F32, &cpu)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    autograd::no_grad(|| assert_eq!(allocations(|| x.add(&b).unwrap()), OUTPUT, "no_grad add"));
}

#[test]
fn recording_a_node_allocates_only_the_node() {
    let cpu = Device::Cpu;
    let x = Tensor::ones([1], DType::F32, &cpu)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    let b = Tensor::ones([1], DType::F32, &cpu).unwrap();
    // the output and the node (recycled blocks), whose formula for an
    // elementwise op is held in the node (Note [Formulas in the node]);
    // add's formula saves no tensor, exp's saves its output (a handle in
    // the node, no block)
    assert_eq!(allocations(|| x.add(&b).unwrap()), OUTPUT, "graph add");
    assert_eq!(allocations(|| x.mul(&b).unwrap()), OUTPUT, "graph mul");
    assert_eq!(allocations(|| x.exp().unwrap()), OUTPUT, "graph exp");
    assert_eq!(allocations(|| x.relu().unwrap()), OUTPUT, "graph relu");
    // other formulas are a boxed closure: one heap block
    assert_eq!(
        allocations(|| x.clamp(0.0, 1.0).unwrap()),
        OUTPUT + 1,
        "graph clamp"
    );
}

#[test]
fn emu_launch_allocates_only_the_output() {
    let emu = Device::Emulated(0);
    let a = Tensor::ones([1], DType::F32, &emu).unwrap();
    let b = Tensor::ones([1], DType::F32, &emu).unwrap();
    tensorguard::device::synchronize(&emu).unwrap();
    let n = allocations(|| {
        let r = a.add(&b).unwrap();
        tensorguard::device::synchronize(&emu).unwrap();
        r
    });
    // the queued task lives in the stream's queue by value (no `Box`), and
    // the host waits without allocating
    assert_eq!(n, OUTPUT, "emu add + synchronize");
}

#[test]
fn a_counted_copy_allocates_nothing_on_the_host() {
    let emu = Device::Emulated(0);
    let x = Tensor::ones([256], DType::F32, &Device::Cpu).unwrap();
    let dst = Tensor::empty([256], DType::F32, &emu).unwrap();
    tensorguard::transfer::set_enabled(true);
    // the ledger's row is the copy's time column (no closure per copy)
    let n = allocations(|| {
        dst.copy_(&x).unwrap();
    });
    assert_eq!(n, 0, "a blocking 1 KiB copy_ to emu:0 with the ledger on");
}
