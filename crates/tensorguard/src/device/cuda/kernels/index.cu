// Indexing kernels (index_select / gather as one "take along dim" kernel,
// cat as one strided copy per input, index_add_ / scatter_add_ with
// atomics) and the integer matmul. Mirrors device/cpu/index.rs and the
// integer path of device/cpu/matmul.rs.
//
// An index outside [0, size) is never read through: the kernel reports it
// with tg_fault(rec, launch, TG_FAULT_INDEX, index, size, dim) and skips
// the element (the op then fails on the host).

// tg_offset with a fast path for one (coalesced) dim; the general case is
// one out-of-line copy of tg_offset, which keeps the many kernels of this
// file small and quick to compile.
__device__ __noinline__ long long ix_off_slow(const Strided s, long long i) { return tg_offset(s, i); }
__device__ __forceinline__ long long ix_off(const Strided& s, long long i) {
    return s.ndim == 1 ? s.offset + i * s.strides[0] : ix_off_slow(s, i);
}

// out[i] = src[ix_off(src_l, i) + j * sdim] with j = idx[ix_off(idx_l, i)];
// `ol`, `src_l` and `idx_l` share one shape (n elements); src_l has stride 0
// along the indexed dim.
template <typename T>
__device__ void ix_take(T* out, const Strided ol, const T* src, const Strided src_l, long long sdim,
                        long long size, long long dim, const long long* idx, const Strided idx_l,
                        long long n, FaultRecord* rec, unsigned long long launch) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const long long j = idx[ix_off(idx_l, i)];
        if (j < 0 || j >= size) {
            tg_fault(rec, launch, TG_FAULT_INDEX, j, size, dim);
            continue;
        }
        out[ix_off(ol, i)] = src[ix_off(src_l, i) + j * sdim];
    }
}

// out[ix_off(ol, i)] = in[ix_off(il, i)] for i < n (one input of a cat)
template <typename T>
__device__ void ix_cat(T* out, const Strided ol, const T* in, const Strided il, long long n) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        out[ix_off(ol, i)] = in[ix_off(il, i)];
}

// ---------------------------------------------------------------- atomic adds

__device__ __forceinline__ void ix_atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void ix_atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void ix_atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void ix_atomic_add(long long* p, long long v) {
    atomicAdd((unsigned long long*)p, (unsigned long long)v);  // wraps, as i64::wrapping_add
}

// A 1- or 2-byte value updated through a compare-and-swap loop on the
// aligned 32-bit word that contains it.
__device__ __forceinline__ unsigned int ix_add_bits(unsigned int old, unsigned char v) {
    return (unsigned int)(unsigned char)(old + v);  // u8 wrapping_add
}
__device__ __forceinline__ unsigned int ix_add_bits(unsigned int old, tg_half v) {
    tg_half o;
    o.x = (unsigned short)old;
    return tg_f2h(tg_h2f(o) + tg_h2f(v)).x;  // half's f16 + f16: in f32, rounded once
}
__device__ __forceinline__ unsigned int ix_add_bits(unsigned int old, tg_bf16 v) {
    tg_bf16 o;
    o.x = (unsigned short)old;
    return tg_f2b(tg_b2f(o) + tg_b2f(v)).x;
}
template <typename T> __device__ __forceinline__ void ix_atomic_add_cas(T* p, T v) {
    const unsigned long long addr = (unsigned long long)p;
    unsigned int* word = (unsigned int*)(addr & ~3ull);
    const unsigned int shift = (unsigned int)(addr & 3ull) * 8u;
    const unsigned int mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
    unsigned int old = *(volatile unsigned int*)word;
    while (true) {
        const unsigned int cur = (old & mask) >> shift;
        const unsigned int upd = (old & ~mask) | ((ix_add_bits(cur, v) << shift) & mask);
        const unsigned int seen = atomicCAS(word, old, upd);
        if (seen == old) break;
        old = seen;
    }
}
__device__ __forceinline__ void ix_atomic_add(unsigned char* p, unsigned char v) { ix_atomic_add_cas(p, v); }
__device__ __forceinline__ void ix_atomic_add(tg_half* p, tg_half v) { ix_atomic_add_cas(p, v); }
__device__ __forceinline__ void ix_atomic_add(tg_bf16* p, tg_bf16 v) { ix_atomic_add_cas(p, v); }

// For each position i < n of the iterated shape: j = idx[ix_off(idx_l, i)],
// out[ix_off(ol, i) + j * ostride] += src[ix_off(src_l, i)]; `ol` has
// stride 0 along the indexed dim.
template <typename T>
__device__ void ix_index_add(T* out, const Strided ol, long long ostride, long long size, long long dim,
                             const T* src, const Strided src_l, const long long* idx, const Strided idx_l,
                             long long n, FaultRecord* rec, unsigned long long launch) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const long long j = idx[ix_off(idx_l, i)];
        if (j < 0 || j >= size) {
            tg_fault(rec, launch, TG_FAULT_INDEX, j, size, dim);
            continue;
        }
        ix_atomic_add(out + ix_off(ol, i) + j * ostride, src[ix_off(src_l, i)]);
    }
}

// ---------------------------------------------------------------- integer matmul

// out[b][r][c] = sum_j a[b][r][j] * b[b][j][c], wrapping in 64 bits then
// cast to T (the cpu's naive integer path); one thread per output element.
// `ob`, `ab`, `bb` address the batch (shape: the batch dims, offsets
// included); rs/cs are the row/column strides of the matrices.
template <typename T>
__device__ void ix_matmul(T* out, const Strided ob, long long ors, long long ocs, const T* a, const Strided ab,
                          long long ars, long long acs, const T* b, const Strided bb, long long brs,
                          long long bcs, long long m, long long n, long long k, long long total) {
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long mn = m * n;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const long long bi = i / mn, r = (i / n) % m, c = i % n;
        const T* pa = a + ix_off(ab, bi) + r * ars;
        const T* pb = b + ix_off(bb, bi) + c * bcs;
        unsigned long long acc = 0ull;
        for (long long j = 0; j < k; ++j)
            acc += (unsigned long long)(long long)pa[j * acs] * (unsigned long long)(long long)pb[j * brs];
        out[ix_off(ob, bi) + r * ors + c * ocs] = (T)(long long)acc;
    }
}

// ---------------------------------------------------------------- entry points

// Kernels are grouped in parts by dtype (TG_PART, set by nvrtc.rs with
// -DTG_PART=k) so a process compiles only the dtypes it uses; without
// TG_PART every part is compiled. index.rs (`part`) maps a kernel
// name to its part: the position of its dtype suffix in
// bool, u8, i32, i64, f16, bf16, f32, f64.
#ifdef TG_PART
#define IX_WANT(k) (TG_PART == (k))
#else
#define IX_WANT(k) 1
#endif

#define IX_TP(T) T* out, const Strided ol, const T* src, const Strided src_l, long long sdim, long long size, \
                 long long dim, const long long* idx, const Strided idx_l, long long n, FaultRecord* rec,     \
                 unsigned long long launch
#define IX_TA out, ol, src, src_l, sdim, size, dim, idx, idx_l, n, rec, launch
#define IX_CP(T) T* out, const Strided ol, const T* in, const Strided il, long long n
#define IX_AP(T) T* out, const Strided ol, long long ostride, long long size, long long dim, const T* src, \
                 const Strided src_l, const long long* idx, const Strided idx_l, long long n,               \
                 FaultRecord* rec, unsigned long long launch
#define IX_AA out, ol, ostride, size, dim, src, src_l, idx, idx_l, n, rec, launch
#define IX_MP(T) T* out, const Strided ob, long long ors, long long ocs, const T* a, const Strided ab, \
                 long long ars, long long acs, const T* b, const Strided bb, long long brs, long long bcs, \
                 long long m, long long n, long long k, long long total
#define IX_MA out, ob, ors, ocs, a, ab, ars, acs, b, bb, brs, bcs, m, n, k, total

#if IX_WANT(0)  // bool (index_add adds as u8, wrapping, as the cpu's with_arith does)
extern "C" __global__ void tg_take_bool(IX_TP(unsigned char)) { ix_take(IX_TA); }
extern "C" __global__ void tg_cat_bool(IX_CP(unsigned char)) { ix_cat(out, ol, in, il, n); }
extern "C" __global__ void tg_index_add_bool(IX_AP(unsigned char)) { ix_index_add(IX_AA); }
#endif

#if IX_WANT(1)  // u8
extern "C" __global__ void tg_take_u8(IX_TP(unsigned char)) { ix_take(IX_TA); }
extern "C" __global__ void tg_cat_u8(IX_CP(unsigned char)) { ix_cat(out, ol, in, il, n); }
extern "C" __global__ void tg_index_add_u8(IX_AP(unsigned char)) { ix_index_add(IX_AA); }
extern "C" __global__ void tg_matmul_u8(IX_MP(unsigned char)) { ix_matmul(IX_MA); }
#endif

#if IX_WANT(2)  // i32
extern "C" __global__ void tg_take_i32(IX_TP(int)) { ix_take(IX_TA); }
extern "C" __global__ void tg_cat_i32(IX_CP(int)) { ix_cat(out, ol, in, il, n); }
extern "C" __global__ void tg_index_add_i32(IX_AP(int)) { ix_index_add(IX_AA); }
extern "C" __global__ void tg_matmul_i32(IX_MP(int)) { ix_matmul(IX_MA); }
#endif

#if IX_WANT(3)  // i64
extern "C" __global__ void tg_take_i64(IX_TP(long long)) { ix_take(IX_TA); }
extern "C" __global__ void tg_cat_i64(IX_CP(long long)) { ix_cat(out, ol, in, il, n); }
extern "C" __global__ void tg_index_add_i64(IX_AP(long long)) { ix_index_add(IX_AA); }
extern "C" __global__ void tg_matmul_i64(IX_MP(long long)) { ix_matmul(IX_MA); }
#endif

#if IX_WANT(4)  // f16
extern "C" __global__ void tg_take_f16(IX_TP(tg_half)) { ix_take(IX_TA); }
extern "C" __global__ void tg_cat_f16(IX_CP(tg_half)) { ix_cat(out, ol, in, il, n); }
extern "C" __global__ void tg_index_add_f16(IX_AP(tg_half)) { ix_index_add(IX_AA); }
#endif

#if IX_WANT(5)  // bf16
extern "C" __global__ void tg_take_bf16(IX_TP(tg_bf16)) { ix_take(IX_TA); }
extern "C" __global__ void tg_cat_bf16(IX_CP(tg_bf16)) { ix_cat(out, ol, in, il, n); }
extern "C" __global__ void tg_index_add_bf16(IX_AP(tg_bf16)) { ix_index_add(IX_AA); }
#endif

#if IX_WANT(6)  // f32
extern "C" __global__ void tg_take_f32(IX_TP(float)) { ix_take(IX_TA); }
extern "C" __global__ void tg_cat_f32(IX_CP(float)) { ix_cat(out, ol, in, il, n); }
extern "C" __global__ void tg_index_add_f32(IX_AP(float)) { ix_index_add(IX_AA); }
#endif

#if IX_WANT(7)  // f64
extern "C" __global__ void tg_take_f64(IX_TP(double)) { ix_take(IX_TA); }
extern "C" __global__ void tg_cat_f64(IX_CP(double)) { ix_cat(out, ol, in, il, n); }
extern "C" __global__ void tg_index_add_f64(IX_AP(double)) { ix_index_add(IX_AA); }
#endif
