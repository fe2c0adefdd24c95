// Reductions (sum, mean, prod, max, min, argmax, argmin, var/std), max/min
// with indices along one dim, and softmax / log_softmax. Mirrors
// device/cpu/reduce.rs: float sums, products and variances accumulate in
// double (the cpu accumulates in f64), integer sums and products wrap in
// 64 bits, max/min propagate the first NaN and break ties by the first
// occurrence.
//
// Layout of every reduction launch (built by reduce.rs):
// - `outer` is the input with the reduced dims set to size 1 (their
//   coalesced form), `ol` the output in the same (keepdim) shape: output
//   element o lives at ol[o] and its lane starts at in + rx_off(outer, o);
// - `lanes` holds the reduced dims (offset 0): lane element j lies at
//   rx_off(lanes, j) from the lane start; `len` is the lane length;
// - `group` threads cooperate on one output: a power of two <= 32 (a
//   segment of a warp, reduced with shuffles), or blockDim.x (the whole
//   block, reduced through shared memory). blockDim.x is a multiple of 32
//   and of `group`; every thread of the block runs the same number of loop
//   iterations, so the shuffles (full mask) and __syncthreads are reached
//   by all threads.

// tg_offset with a fast path for one (coalesced) dim; the general case is
// one out-of-line copy of tg_offset, which keeps the many kernels of this
// file small and quick to compile.
__device__ __noinline__ long long rx_off_slow(const Strided s, long long i) { return tg_offset(s, i); }
__device__ __forceinline__ long long rx_off(const Strided& s, long long i) {
    return s.ndim == 1 ? s.offset + i * s.strides[0] : rx_off_slow(s, i);
}

// ---------------------------------------------------------------- values

// to_f64
__device__ __forceinline__ double rx_f(unsigned char v) { return (double)v; }
__device__ __forceinline__ double rx_f(int v) { return (double)v; }
__device__ __forceinline__ double rx_f(long long v) { return (double)v; }
__device__ __forceinline__ double rx_f(tg_half v) { return (double)tg_h2f(v); }
__device__ __forceinline__ double rx_f(tg_bf16 v) { return (double)tg_b2f(v); }
__device__ __forceinline__ double rx_f(float v) { return (double)v; }
__device__ __forceinline__ double rx_f(double v) { return v; }

// to_i64 (only used for the integer types)
__device__ __forceinline__ long long rx_i(unsigned char v) { return (long long)v; }
__device__ __forceinline__ long long rx_i(int v) { return (long long)v; }
__device__ __forceinline__ long long rx_i(long long v) { return v; }
__device__ __forceinline__ long long rx_i(tg_half v) { return (long long)tg_h2f(v); }
__device__ __forceinline__ long long rx_i(tg_bf16 v) { return (long long)tg_b2f(v); }
__device__ __forceinline__ long long rx_i(float v) { return (long long)v; }
__device__ __forceinline__ long long rx_i(double v) { return (long long)v; }

// from_f64 (f16: through f32, as the cpu's `half` does on x86): integers saturate toward zero then wrap (Rust `v as i64 as T`;
// PTX cvt.rzi saturates and maps NaN to 0, as Rust does)
__device__ __forceinline__ void rx_set_f(unsigned char* p, double v) { *p = (unsigned char)(long long)v; }
__device__ __forceinline__ void rx_set_f(int* p, double v) { *p = (int)(long long)v; }
__device__ __forceinline__ void rx_set_f(long long* p, double v) { *p = (long long)v; }
__device__ __forceinline__ void rx_set_f(tg_half* p, double v) { *p = tg_f2h((float)v); }
// f64 -> bf16 as the `half` crate does it: the low 32 bits of the f64 are
// dropped, then rounded to nearest even (through f32, which holds the
// remaining bits exactly)
__device__ __forceinline__ tg_bf16 rx_d2b(double v) {
    return tg_f2b((float)__longlong_as_double(__double_as_longlong(v) & (long long)0xffffffff00000000ull));
}
__device__ __forceinline__ void rx_set_f(tg_bf16* p, double v) { *p = rx_d2b(v); }
__device__ __forceinline__ void rx_set_f(float* p, double v) { *p = (float)v; }
__device__ __forceinline__ void rx_set_f(double* p, double v) { *p = v; }

// from_i64: integers wrap
__device__ __forceinline__ void rx_set_i(unsigned char* p, long long v) { *p = (unsigned char)v; }
__device__ __forceinline__ void rx_set_i(int* p, long long v) { *p = (int)v; }
__device__ __forceinline__ void rx_set_i(long long* p, long long v) { *p = v; }
__device__ __forceinline__ void rx_set_i(tg_half* p, long long v) { *p = tg_f2h((float)(double)v); }
__device__ __forceinline__ void rx_set_i(tg_bf16* p, long long v) { *p = rx_d2b((double)v); }
__device__ __forceinline__ void rx_set_i(float* p, long long v) { *p = (float)v; }
__device__ __forceinline__ void rx_set_i(double* p, long long v) { *p = (double)v; }

// The comparison type of T (exact for every T) and whether T is a float.
template <typename T> struct RxT { typedef long long cmp; static const bool is_float = false; };
template <> struct RxT<tg_half> { typedef float cmp; static const bool is_float = true; };
template <> struct RxT<tg_bf16> { typedef float cmp; static const bool is_float = true; };
template <> struct RxT<float> { typedef float cmp; static const bool is_float = true; };
template <> struct RxT<double> { typedef double cmp; static const bool is_float = true; };

__device__ __forceinline__ long long rx_c(unsigned char v, long long*) { return (long long)v; }
__device__ __forceinline__ long long rx_c(int v, long long*) { return (long long)v; }
__device__ __forceinline__ long long rx_c(long long v, long long*) { return v; }
__device__ __forceinline__ float rx_c(tg_half v, float*) { return tg_h2f(v); }
__device__ __forceinline__ float rx_c(tg_bf16 v, float*) { return tg_b2f(v); }
__device__ __forceinline__ float rx_c(float v, float*) { return v; }
__device__ __forceinline__ double rx_c(double v, double*) { return v; }
template <typename T> __device__ __forceinline__ typename RxT<T>::cmp rx_cmp(T v) {
    return rx_c(v, (typename RxT<T>::cmp*)0);
}

__device__ __forceinline__ bool rx_isnan(long long) { return false; }
__device__ __forceinline__ bool rx_isnan(float v) { return v != v; }
__device__ __forceinline__ bool rx_isnan(double v) { return v != v; }

// ---------------------------------------------------------------- combining

// A max/min candidate: its value and its index in the lane (RX_NONE: no
// element yet, the identity).
#define RX_NONE 0x7fffffffffffffffLL
template <typename A> struct RxPick { A v; long long i; };

__device__ __forceinline__ float rx_shfl(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double rx_shfl(double v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ long long rx_shfl(long long v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ unsigned long long rx_shfl(unsigned long long v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
template <typename A> __device__ __forceinline__ RxPick<A> rx_shfl(RxPick<A> p, int o) {
    RxPick<A> r;
    r.v = rx_shfl(p.v, o);
    r.i = rx_shfl(p.i, o);
    return r;
}

struct RxAdd { template <typename V> __device__ static V f(V a, V b) { return a + b; } };
struct RxMul { template <typename V> __device__ static V f(V a, V b) { return a * b; } };
// max ignoring NaN (Rust's f64::max), for softmax's row max
struct RxFmax {
    __device__ static float f(float a, float b) { return fmaxf(a, b); }
    __device__ static double f(double a, double b) { return fmax(a, b); }
};
// The first NaN if any, else the largest (smallest) value, ties to the
// first index: symmetric, so every thread of a butterfly ends equal, and
// equal to the cpu's sequential scan.
template <bool MAX> struct RxBest {
    template <typename A> __device__ static RxPick<A> f(RxPick<A> a, RxPick<A> b) {
        if (a.i == RX_NONE) return b;
        if (b.i == RX_NONE) return a;
        bool an = rx_isnan(a.v), bn = rx_isnan(b.v);
        if (an || bn) {
            if (an && bn) return a.i < b.i ? a : b;
            return an ? a : b;
        }
        if (MAX ? (a.v > b.v) : (a.v < b.v)) return a;
        if (MAX ? (b.v > a.v) : (b.v < a.v)) return b;
        return a.i < b.i ? a : b;
    }
};

// Combine `v` over the `group` threads of this thread's segment; every
// thread of the segment gets the result. Called by all threads of the block.
template <typename Op, typename V> __device__ __forceinline__ V rx_all(V v, int group) {
    if (group > 32) {
        for (int o = 16; o > 0; o >>= 1) v = Op::f(v, rx_shfl(v, o));
        __shared__ V sh[32];
        const int nw = blockDim.x >> 5;
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
        __syncthreads();
        v = sh[0];
        for (int w = 1; w < nw; ++w) v = Op::f(v, sh[w]);
        __syncthreads();
        return v;
    }
    for (int o = group >> 1; o > 0; o >>= 1) v = Op::f(v, rx_shfl(v, o));
    return v;
}

// The grid-stride loop over outputs: `o` is this segment's output, `valid`
// whether it exists, `t` the thread's rank in its segment, `ib` the lane start.
#define RX_LOOP_BEGIN                                                              \
    const int per_block = blockDim.x / group;                                      \
    const int t = threadIdx.x % group;                                             \
    for (long long first = (long long)blockIdx.x * per_block; first < n_out;       \
         first += (long long)gridDim.x * per_block) {                              \
        const long long o = first + threadIdx.x / group;                           \
        const bool valid = o < n_out;                                              \
        const long long ib = valid ? rx_off(outer, o) : 0;
#define RX_LOOP_END }

#define RX_LANE_PARAMS const Strided outer, const Strided lanes, long long n_out, long long len, int group

// ---------------------------------------------------------------- kernels

// sum (mean: divided by len after rounding the sum to T, as the cpu does)
template <typename T>
__device__ void rx_sum(T* out, const Strided ol, const T* in, RX_LANE_PARAMS, bool mean) {
    RX_LOOP_BEGIN
    T s;
    if (RxT<T>::is_float) {
        double acc = 0.0;
        if (valid)
            for (long long j = t; j < len; j += group) acc += rx_f(in[ib + rx_off(lanes, j)]);
        acc = rx_all<RxAdd>(acc, group);
        rx_set_f(&s, acc);
    } else {
        unsigned long long acc = 0ull;
        if (valid)
            for (long long j = t; j < len; j += group)
                acc += (unsigned long long)rx_i(in[ib + rx_off(lanes, j)]);
        acc = rx_all<RxAdd>(acc, group);
        rx_set_i(&s, (long long)acc);
    }
    if (valid && t == 0) {
        T* p = out + rx_off(ol, o);
        if (mean) rx_set_f(p, rx_f(s) / (double)len);
        else *p = s;
    }
    RX_LOOP_END
}

template <typename T>
__device__ void rx_prod(T* out, const Strided ol, const T* in, RX_LANE_PARAMS) {
    RX_LOOP_BEGIN
    if (RxT<T>::is_float) {
        double acc = 1.0;
        if (valid)
            for (long long j = t; j < len; j += group) acc *= rx_f(in[ib + rx_off(lanes, j)]);
        acc = rx_all<RxMul>(acc, group);
        if (valid && t == 0) rx_set_f(out + rx_off(ol, o), acc);
    } else {
        unsigned long long acc = 1ull;
        if (valid)
            for (long long j = t; j < len; j += group)
                acc *= (unsigned long long)rx_i(in[ib + rx_off(lanes, j)]);
        acc = rx_all<RxMul>(acc, group);
        if (valid && t == 0) rx_set_i(out + rx_off(ol, o), (long long)acc);
    }
    RX_LOOP_END
}

// The best element of this segment's lane (all threads of the segment get it).
template <bool MAX, typename T>
__device__ __forceinline__ RxPick<typename RxT<T>::cmp> rx_best(const T* in, long long ib, bool valid,
                                                              int t, const Strided lanes, long long len,
                                                              int group) {
    typedef typename RxT<T>::cmp A;
    RxPick<A> b;
    b.v = (A)0;
    b.i = RX_NONE;
    if (valid)
        for (long long j = t; j < len; j += group) {
            RxPick<A> c;
            c.v = rx_cmp(in[ib + rx_off(lanes, j)]);
            c.i = j;
            b = RxBest<MAX>::f(b, c);
        }
    return rx_all<RxBest<MAX> >(b, group);
}

// max/min: the winning element itself (its exact bits); 0 for an empty lane
template <bool MAX, typename T>
__device__ void rx_extreme(T* out, const Strided ol, const T* in, RX_LANE_PARAMS) {
    RX_LOOP_BEGIN
    RxPick<typename RxT<T>::cmp> b = rx_best<MAX>(in, ib, valid, t, lanes, len, group);
    if (valid && t == 0) {
        T* p = out + rx_off(ol, o);
        if (b.i == RX_NONE) rx_set_i(p, 0);
        else *p = in[ib + rx_off(lanes, b.i)];
    }
    RX_LOOP_END
}

// argmax/argmin: the index in the (row-major) reduced dims; 0 for an empty lane
template <bool MAX, typename T>
__device__ void rx_arg(long long* out, const Strided ol, const T* in, RX_LANE_PARAMS) {
    RX_LOOP_BEGIN
    RxPick<typename RxT<T>::cmp> b = rx_best<MAX>(in, ib, valid, t, lanes, len, group);
    if (valid && t == 0) out[rx_off(ol, o)] = b.i == RX_NONE ? 0 : b.i;
    RX_LOOP_END
}

// max/min along one dim: values (`ol`) and indices (`il`, same shape)
template <bool MAX, typename T>
__device__ void rx_extreme_dim(T* vals, const Strided ol, long long* idxs, const Strided il, const T* in,
                               RX_LANE_PARAMS) {
    RX_LOOP_BEGIN
    RxPick<typename RxT<T>::cmp> b = rx_best<MAX>(in, ib, valid, t, lanes, len, group);
    if (valid && t == 0) {
        T* p = vals + rx_off(ol, o);
        if (b.i == RX_NONE) {
            rx_set_i(p, 0);
            idxs[rx_off(il, o)] = 0;
        } else {
            *p = in[ib + rx_off(lanes, b.i)];
            idxs[rx_off(il, o)] = b.i;
        }
    }
    RX_LOOP_END
}

// var / std (`root`): two passes in double, m2 / max(n - correction, 0)
template <typename T>
__device__ void rx_var(T* out, const Strided ol, const T* in, RX_LANE_PARAMS, double correction, int root) {
    RX_LOOP_BEGIN
    const double n = (double)len;
    double s = 0.0;
    if (valid)
        for (long long j = t; j < len; j += group) s += rx_f(in[ib + rx_off(lanes, j)]);
    const double mean = rx_all<RxAdd>(s, group) / n;
    double m2 = 0.0;
    if (valid)
        for (long long j = t; j < len; j += group) {
            double d = rx_f(in[ib + rx_off(lanes, j)]) - mean;
            m2 += d * d;
        }
    m2 = rx_all<RxAdd>(m2, group);
    if (valid && t == 0) {
        double v = m2 / fmax(n - correction, 0.0);
        rx_set_f(out + rx_off(ol, o), root ? sqrt(v) : v);
    }
    RX_LOOP_END
}

// softmax / log_softmax of each row: rows are the outputs of `outer`
// (input) and `ol` (output), row elements are `len` apart by `ist`
// (input) and `ost` (output). Computed in float for f16/bf16/f32, double
// for f64: max, then sum of exp(x - max), then the write.
__device__ __forceinline__ float rx_neg_inf(float) { return __int_as_float(0xff800000); }
__device__ __forceinline__ double rx_neg_inf(double) { return __longlong_as_double((long long)0xfff0000000000000ull); }
__device__ __forceinline__ float rx_exp(float v) { return expf(v); }
__device__ __forceinline__ double rx_exp(double v) { return exp(v); }
__device__ __forceinline__ float rx_log(float v) { return logf(v); }
__device__ __forceinline__ double rx_log(double v) { return log(v); }

template <typename T>
__device__ void rx_softmax(T* out, const Strided ol, long long ost, const T* in, const Strided outer,
                           long long ist, long long n_out, long long len, int group, int log_) {
    typedef typename Acc<T>::type C;
    RX_LOOP_BEGIN
    C m = rx_neg_inf((C)0);
    if (valid)
        for (long long j = t; j < len; j += group) m = RxFmax::f(m, tg_load(in + ib + j * ist));
    m = rx_all<RxFmax>(m, group);
    C s = (C)0;
    if (valid)
        for (long long j = t; j < len; j += group) s += rx_exp(tg_load(in + ib + j * ist) - m);
    s = rx_all<RxAdd>(s, group);
    if (valid) {
        const long long ob = rx_off(ol, o);
        const C ls = rx_log(s);
        for (long long j = t; j < len; j += group) {
            C v = tg_load(in + ib + j * ist) - m;
            tg_store(out + ob + j * ost, log_ ? v - ls : rx_exp(v) / s);
        }
    }
    RX_LOOP_END
}

// ---------------------------------------------------------------- entry points

// Kernels are grouped in parts by dtype (TG_PART, set by nvrtc.rs with
// -DTG_PART=k) so a process compiles only the dtypes it uses; without
// TG_PART every part is compiled. reduce.rs (`part`) maps a kernel
// name to its part: the position of its dtype suffix in
// u8, i32, i64, f16, bf16, f32, f64.
#ifdef TG_PART
#define RX_WANT(k) (TG_PART == (k))
#else
#define RX_WANT(k) 1
#endif

#define RX_P(TO, TI) TO* out, const Strided ol, const TI* in, RX_LANE_PARAMS
#define RX_A out, ol, in, outer, lanes, n_out, len, group
#define RX_VP(T) RX_P(T, T), double correction, int root
#define RX_DP(T) T* vals, const Strided ol, long long* idxs, const Strided il, const T* in, RX_LANE_PARAMS
#define RX_DA vals, ol, idxs, il, in, outer, lanes, n_out, len, group
#define RX_SP(T) T* out, const Strided ol, long long ost, const T* in, const Strided outer, long long ist, \
                 long long n_out, long long len, int group, int log_
#define RX_SA out, ol, ost, in, outer, ist, n_out, len, group, log_

#if RX_WANT(0)  // u8
extern "C" __global__ void tg_sum_u8(RX_P(unsigned char, unsigned char)) { rx_sum(RX_A, false); }
extern "C" __global__ void tg_mean_u8(RX_P(unsigned char, unsigned char)) { rx_sum(RX_A, true); }
extern "C" __global__ void tg_prod_u8(RX_P(unsigned char, unsigned char)) { rx_prod(RX_A); }
extern "C" __global__ void tg_max_u8(RX_P(unsigned char, unsigned char)) { rx_extreme<true>(RX_A); }
extern "C" __global__ void tg_min_u8(RX_P(unsigned char, unsigned char)) { rx_extreme<false>(RX_A); }
extern "C" __global__ void tg_argmax_u8(RX_P(long long, unsigned char)) { rx_arg<true>(RX_A); }
extern "C" __global__ void tg_argmin_u8(RX_P(long long, unsigned char)) { rx_arg<false>(RX_A); }
extern "C" __global__ void tg_max_dim_u8(RX_DP(unsigned char)) { rx_extreme_dim<true>(RX_DA); }
extern "C" __global__ void tg_min_dim_u8(RX_DP(unsigned char)) { rx_extreme_dim<false>(RX_DA); }
#endif

#if RX_WANT(1)  // i32
extern "C" __global__ void tg_sum_i32(RX_P(int, int)) { rx_sum(RX_A, false); }
extern "C" __global__ void tg_mean_i32(RX_P(int, int)) { rx_sum(RX_A, true); }
extern "C" __global__ void tg_prod_i32(RX_P(int, int)) { rx_prod(RX_A); }
extern "C" __global__ void tg_max_i32(RX_P(int, int)) { rx_extreme<true>(RX_A); }
extern "C" __global__ void tg_min_i32(RX_P(int, int)) { rx_extreme<false>(RX_A); }
extern "C" __global__ void tg_argmax_i32(RX_P(long long, int)) { rx_arg<true>(RX_A); }
extern "C" __global__ void tg_argmin_i32(RX_P(long long, int)) { rx_arg<false>(RX_A); }
extern "C" __global__ void tg_max_dim_i32(RX_DP(int)) { rx_extreme_dim<true>(RX_DA); }
extern "C" __global__ void tg_min_dim_i32(RX_DP(int)) { rx_extreme_dim<false>(RX_DA); }
#endif

#if RX_WANT(2)  // i64
extern "C" __global__ void tg_sum_i64(RX_P(long long, long long)) { rx_sum(RX_A, false); }
extern "C" __global__ void tg_mean_i64(RX_P(long long, long long)) { rx_sum(RX_A, true); }
extern "C" __global__ void tg_prod_i64(RX_P(long long, long long)) { rx_prod(RX_A); }
extern "C" __global__ void tg_max_i64(RX_P(long long, long long)) { rx_extreme<true>(RX_A); }
extern "C" __global__ void tg_min_i64(RX_P(long long, long long)) { rx_extreme<false>(RX_A); }
extern "C" __global__ void tg_argmax_i64(RX_P(long long, long long)) { rx_arg<true>(RX_A); }
extern "C" __global__ void tg_argmin_i64(RX_P(long long, long long)) { rx_arg<false>(RX_A); }
extern "C" __global__ void tg_max_dim_i64(RX_DP(long long)) { rx_extreme_dim<true>(RX_DA); }
extern "C" __global__ void tg_min_dim_i64(RX_DP(long long)) { rx_extreme_dim<false>(RX_DA); }
#endif

#if RX_WANT(3)  // f16
extern "C" __global__ void tg_sum_f16(RX_P(tg_half, tg_half)) { rx_sum(RX_A, false); }
extern "C" __global__ void tg_mean_f16(RX_P(tg_half, tg_half)) { rx_sum(RX_A, true); }
extern "C" __global__ void tg_prod_f16(RX_P(tg_half, tg_half)) { rx_prod(RX_A); }
extern "C" __global__ void tg_max_f16(RX_P(tg_half, tg_half)) { rx_extreme<true>(RX_A); }
extern "C" __global__ void tg_min_f16(RX_P(tg_half, tg_half)) { rx_extreme<false>(RX_A); }
extern "C" __global__ void tg_argmax_f16(RX_P(long long, tg_half)) { rx_arg<true>(RX_A); }
extern "C" __global__ void tg_argmin_f16(RX_P(long long, tg_half)) { rx_arg<false>(RX_A); }
extern "C" __global__ void tg_var_f16(RX_VP(tg_half)) { rx_var(RX_A, correction, root); }
extern "C" __global__ void tg_max_dim_f16(RX_DP(tg_half)) { rx_extreme_dim<true>(RX_DA); }
extern "C" __global__ void tg_min_dim_f16(RX_DP(tg_half)) { rx_extreme_dim<false>(RX_DA); }
extern "C" __global__ void tg_softmax_f16(RX_SP(tg_half)) { rx_softmax(RX_SA); }
#endif

#if RX_WANT(4)  // bf16
extern "C" __global__ void tg_sum_bf16(RX_P(tg_bf16, tg_bf16)) { rx_sum(RX_A, false); }
extern "C" __global__ void tg_mean_bf16(RX_P(tg_bf16, tg_bf16)) { rx_sum(RX_A, true); }
extern "C" __global__ void tg_prod_bf16(RX_P(tg_bf16, tg_bf16)) { rx_prod(RX_A); }
extern "C" __global__ void tg_max_bf16(RX_P(tg_bf16, tg_bf16)) { rx_extreme<true>(RX_A); }
extern "C" __global__ void tg_min_bf16(RX_P(tg_bf16, tg_bf16)) { rx_extreme<false>(RX_A); }
extern "C" __global__ void tg_argmax_bf16(RX_P(long long, tg_bf16)) { rx_arg<true>(RX_A); }
extern "C" __global__ void tg_argmin_bf16(RX_P(long long, tg_bf16)) { rx_arg<false>(RX_A); }
extern "C" __global__ void tg_var_bf16(RX_VP(tg_bf16)) { rx_var(RX_A, correction, root); }
extern "C" __global__ void tg_max_dim_bf16(RX_DP(tg_bf16)) { rx_extreme_dim<true>(RX_DA); }
extern "C" __global__ void tg_min_dim_bf16(RX_DP(tg_bf16)) { rx_extreme_dim<false>(RX_DA); }
extern "C" __global__ void tg_softmax_bf16(RX_SP(tg_bf16)) { rx_softmax(RX_SA); }
#endif

#if RX_WANT(5)  // f32
extern "C" __global__ void tg_sum_f32(RX_P(float, float)) { rx_sum(RX_A, false); }
extern "C" __global__ void tg_mean_f32(RX_P(float, float)) { rx_sum(RX_A, true); }
extern "C" __global__ void tg_prod_f32(RX_P(float, float)) { rx_prod(RX_A); }
extern "C" __global__ void tg_max_f32(RX_P(float, float)) { rx_extreme<true>(RX_A); }
extern "C" __global__ void tg_min_f32(RX_P(float, float)) { rx_extreme<false>(RX_A); }
extern "C" __global__ void tg_argmax_f32(RX_P(long long, float)) { rx_arg<true>(RX_A); }
extern "C" __global__ void tg_argmin_f32(RX_P(long long, float)) { rx_arg<false>(RX_A); }
extern "C" __global__ void tg_var_f32(RX_VP(float)) { rx_var(RX_A, correction, root); }
extern "C" __global__ void tg_max_dim_f32(RX_DP(float)) { rx_extreme_dim<true>(RX_DA); }
extern "C" __global__ void tg_min_dim_f32(RX_DP(float)) { rx_extreme_dim<false>(RX_DA); }
extern "C" __global__ void tg_softmax_f32(RX_SP(float)) { rx_softmax(RX_SA); }
#endif

#if RX_WANT(6)  // f64
extern "C" __global__ void tg_sum_f64(RX_P(double, double)) { rx_sum(RX_A, false); }
extern "C" __global__ void tg_mean_f64(RX_P(double, double)) { rx_sum(RX_A, true); }
extern "C" __global__ void tg_prod_f64(RX_P(double, double)) { rx_prod(RX_A); }
extern "C" __global__ void tg_max_f64(RX_P(double, double)) { rx_extreme<true>(RX_A); }
extern "C" __global__ void tg_min_f64(RX_P(double, double)) { rx_extreme<false>(RX_A); }
extern "C" __global__ void tg_argmax_f64(RX_P(long long, double)) { rx_arg<true>(RX_A); }
extern "C" __global__ void tg_argmin_f64(RX_P(long long, double)) { rx_arg<false>(RX_A); }
extern "C" __global__ void tg_var_f64(RX_VP(double)) { rx_var(RX_A, correction, root); }
extern "C" __global__ void tg_max_dim_f64(RX_DP(double)) { rx_extreme_dim<true>(RX_DA); }
extern "C" __global__ void tg_min_dim_f64(RX_DP(double)) { rx_extreme_dim<false>(RX_DA); }
extern "C" __global__ void tg_softmax_f64(RX_SP(double)) { rx_softmax(RX_SA); }
#endif
