// elementwise.cu: copy/cast, fill, unary, binary, binary with a scalar,
// clamp, where, masked_fill. Compiled after common.cuh (nvrtc.rs).
//
// Semantics mirror the cpu kernels (device/cpu/{copy,elementwise}.rs):
// integers wrap, integer division by zero gives 0, maximum/minimum
// propagate NaN, f16/bf16 compute in f32, bool arithmetic is u8's.
//
// Every kernel comes in two forms, with the parameters in this order
// (elementwise.rs builds them):
//   NAME   (long long n, int vec, O* out, const A* a, ..., extras...)
//          all operands contiguous with out's shape, pointers at element 0
//          of the view; `vec` says every pointer is aligned for N-element
//          vectors (N = 16 / the largest element size, tg_vn).
//   NAME_s (long long n, O* out, Strided os, const A* a, Strided as, ..., extras...)
//          any strides (0 for broadcast dims); every Strided has out's
//          shape and ndim; pointers at the buffer start.
// Extras per family: fill/masked_fill (T value), binary (FaultRecord* rec,
// unsigned long long launch), binary scalar (T s, int rev), clamp (T lo,
// T hi, int has_lo, int has_hi).

// ---------------------------------------------------------------------------
// Loops

template <typename T, int N> struct alignas(sizeof(T) * N) tg_vec {
    T v[N];
};

// Elements per vector: 16 bytes of the largest operand.
template <typename A, typename B = A, typename C = A, typename D = A> __device__ constexpr int tg_vn() {
    return 16 / (sizeof(A) > sizeof(B) ? (sizeof(A) > sizeof(C) ? (sizeof(A) > sizeof(D) ? sizeof(A) : sizeof(D))
                                                                  : (sizeof(C) > sizeof(D) ? sizeof(C) : sizeof(D)))
                                       : (sizeof(B) > sizeof(C) ? (sizeof(B) > sizeof(D) ? sizeof(B) : sizeof(D))
                                                                  : (sizeof(C) > sizeof(D) ? sizeof(C) : sizeof(D))));
}

__device__ __forceinline__ long long tg_tid() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long tg_nthreads() {
    return (long long)gridDim.x * blockDim.x;
}

// Offsets of K operands (K <= 4) that share s0's shape, in one pass of
// divisions. I is the index type: unsigned int when every index fits
// (32-bit divisions are several times cheaper), long long otherwise.
template <typename I, int K>
__device__ __forceinline__ void tg_offs(I i, const Strided& s0, const Strided& s1, const Strided& s2,
                                        const Strided& s3, long long (&off)[4]) {
    off[0] = s0.offset;
    if (K > 1) off[1] = s1.offset;
    if (K > 2) off[2] = s2.offset;
    if (K > 3) off[3] = s3.offset;
#pragma unroll
    for (int d = TG_MAX_DIMS - 1; d >= 0; --d) {
        if (d < s0.ndim) {
            I n = (I)s0.shape[d];
            I q = i / n;
            long long r = (long long)(i - q * n);
            i = q;
            off[0] += r * s0.strides[d];
            if (K > 1) off[1] += r * s1.strides[d];
            if (K > 2) off[2] += r * s2.strides[d];
            if (K > 3) off[3] += r * s3.strides[d];
        }
    }
}

#define TG_U32_MAX 0xffffffffLL

// out[i] = f() -----------------------------------------------------------
template <int N, typename O, typename F> __device__ __forceinline__ void tg_map0(long long n, int vec, O* o, F f) {
    long long tid = tg_tid(), step = tg_nthreads(), start = 0;
    if (vec) {
        long long nv = n / N;
        tg_vec<O, N>* ov = (tg_vec<O, N>*)o;
        for (long long i = tid; i < nv; i += step) {
            tg_vec<O, N> y;
#pragma unroll
            for (int k = 0; k < N; ++k) y.v[k] = f();
            ov[i] = y;
        }
        start = nv * N;
    }
    for (long long i = start + tid; i < n; i += step) o[i] = f();
}
template <typename I, typename O, typename F>
__device__ __forceinline__ void tg_map0_loop(long long n, O* o, const Strided& os, F f) {
    for (long long i = tg_tid(); i < n; i += tg_nthreads()) {
        long long off[4];
        tg_offs<I, 1>((I)i, os, os, os, os, off);
        o[off[0]] = f();
    }
}
template <typename O, typename F> __device__ __forceinline__ void tg_map0_s(long long n, O* o, const Strided& os, F f) {
    if (n <= TG_U32_MAX) tg_map0_loop<unsigned int>(n, o, os, f);
    else tg_map0_loop<long long>(n, o, os, f);
}

// out[i] = f(a[i]) -------------------------------------------------------
template <int N, typename O, typename A, typename F>
__device__ __forceinline__ void tg_map1(long long n, int vec, O* o, const A* a, F f) {
    long long tid = tg_tid(), step = tg_nthreads(), start = 0;
    if (vec) {
        long long nv = n / N;
        tg_vec<O, N>* ov = (tg_vec<O, N>*)o;
        const tg_vec<A, N>* av = (const tg_vec<A, N>*)a;
        for (long long i = tid; i < nv; i += step) {
            tg_vec<A, N> x = av[i];
            tg_vec<O, N> y;
#pragma unroll
            for (int k = 0; k < N; ++k) y.v[k] = f(x.v[k]);
            ov[i] = y;
        }
        start = nv * N;
    }
    for (long long i = start + tid; i < n; i += step) o[i] = f(a[i]);
}
template <typename I, typename O, typename A, typename F>
__device__ __forceinline__ void tg_map1_loop(long long n, O* o, const Strided& os, const A* a, const Strided& as,
                                             F f) {
    for (long long i = tg_tid(); i < n; i += tg_nthreads()) {
        long long off[4];
        tg_offs<I, 2>((I)i, os, as, os, os, off);
        o[off[0]] = f(a[off[1]]);
    }
}
template <typename O, typename A, typename F>
__device__ __forceinline__ void tg_map1_s(long long n, O* o, const Strided& os, const A* a, const Strided& as, F f) {
    if (n <= TG_U32_MAX) tg_map1_loop<unsigned int>(n, o, os, a, as, f);
    else tg_map1_loop<long long>(n, o, os, a, as, f);
}

// out[i] = f(a[i], b[i]) -------------------------------------------------
template <int N, typename O, typename A, typename B, typename F>
__device__ __forceinline__ void tg_map2(long long n, int vec, O* o, const A* a, const B* b, F f) {
    long long tid = tg_tid(), step = tg_nthreads(), start = 0;
    if (vec) {
        long long nv = n / N;
        tg_vec<O, N>* ov = (tg_vec<O, N>*)o;
        const tg_vec<A, N>* av = (const tg_vec<A, N>*)a;
        const tg_vec<B, N>* bv = (const tg_vec<B, N>*)b;
        for (long long i = tid; i < nv; i += step) {
            tg_vec<A, N> x = av[i];
            tg_vec<B, N> y = bv[i];
            tg_vec<O, N> z;
#pragma unroll
            for (int k = 0; k < N; ++k) z.v[k] = f(x.v[k], y.v[k]);
            ov[i] = z;
        }
        start = nv * N;
    }
    for (long long i = start + tid; i < n; i += step) o[i] = f(a[i], b[i]);
}
template <typename I, typename O, typename A, typename B, typename F>
__device__ __forceinline__ void tg_map2_loop(long long n, O* o, const Strided& os, const A* a, const Strided& as,
                                             const B* b, const Strided& bs, F f) {
    for (long long i = tg_tid(); i < n; i += tg_nthreads()) {
        long long off[4];
        tg_offs<I, 3>((I)i, os, as, bs, os, off);
        o[off[0]] = f(a[off[1]], b[off[2]]);
    }
}
template <typename O, typename A, typename B, typename F>
__device__ __forceinline__ void tg_map2_s(long long n, O* o, const Strided& os, const A* a, const Strided& as,
                                          const B* b, const Strided& bs, F f) {
    if (n <= TG_U32_MAX) tg_map2_loop<unsigned int>(n, o, os, a, as, b, bs, f);
    else tg_map2_loop<long long>(n, o, os, a, as, b, bs, f);
}

// out[i] = f(a[i], b[i], c[i]) -------------------------------------------
template <int N, typename O, typename A, typename B, typename C, typename F>
__device__ __forceinline__ void tg_map3(long long n, int vec, O* o, const A* a, const B* b, const C* c, F f) {
    long long tid = tg_tid(), step = tg_nthreads(), start = 0;
    if (vec) {
        long long nv = n / N;
        tg_vec<O, N>* ov = (tg_vec<O, N>*)o;
        const tg_vec<A, N>* av = (const tg_vec<A, N>*)a;
        const tg_vec<B, N>* bv = (const tg_vec<B, N>*)b;
        const tg_vec<C, N>* cv = (const tg_vec<C, N>*)c;
        for (long long i = tid; i < nv; i += step) {
            tg_vec<A, N> x = av[i];
            tg_vec<B, N> y = bv[i];
            tg_vec<C, N> z = cv[i];
            tg_vec<O, N> w;
#pragma unroll
            for (int k = 0; k < N; ++k) w.v[k] = f(x.v[k], y.v[k], z.v[k]);
            ov[i] = w;
        }
        start = nv * N;
    }
    for (long long i = start + tid; i < n; i += step) o[i] = f(a[i], b[i], c[i]);
}
template <typename I, typename O, typename A, typename B, typename C, typename F>
__device__ __forceinline__ void tg_map3_loop(long long n, O* o, const Strided& os, const A* a, const Strided& as,
                                             const B* b, const Strided& bs, const C* c, const Strided& cs, F f) {
    for (long long i = tg_tid(); i < n; i += tg_nthreads()) {
        long long off[4];
        tg_offs<I, 4>((I)i, os, as, bs, cs, off);
        o[off[0]] = f(a[off[1]], b[off[2]], c[off[3]]);
    }
}
template <typename O, typename A, typename B, typename C, typename F>
__device__ __forceinline__ void tg_map3_s(long long n, O* o, const Strided& os, const A* a, const Strided& as,
                                          const B* b, const Strided& bs, const C* c, const Strided& cs, F f) {
    if (n <= TG_U32_MAX) tg_map3_loop<unsigned int>(n, o, os, a, as, b, bs, c, cs, f);
    else tg_map3_loop<long long>(n, o, os, a, as, b, bs, c, cs, f);
}

// ---------------------------------------------------------------------------
// Casts (Copy), as the cpu's `Native::cast`: a float source goes through
// f64, an integer (or bool) source through i64; float -> integer truncates
// toward zero and saturates (NaN -> 0), then wraps to the target width;
// anything -> bool is `!= 0`.

template <typename T> struct tg_is_float {
    static const bool value = false;
};
template <> struct tg_is_float<float> {
    static const bool value = true;
};
template <> struct tg_is_float<double> {
    static const bool value = true;
};
template <> struct tg_is_float<tg_half> {
    static const bool value = true;
};
template <> struct tg_is_float<tg_bf16> {
    static const bool value = true;
};

__device__ __forceinline__ long long tg_f64_to_i64(double d) {
    if (d != d) return 0;
    if (d >= 9223372036854775808.0) return 0x7fffffffffffffffLL;
    if (d <= -9223372036854775808.0) return (long long)0x8000000000000000ULL;
    long long r;
    asm("cvt.rzi.s64.f64 %0, %1;" : "=l"(r) : "d"(d));
    return r;
}

template <typename O> __device__ __forceinline__ O tg_from_f64(double d) {
    return (O)tg_f64_to_i64(d);  // integers: saturate to i64, then wrap
}
template <> __device__ __forceinline__ float tg_from_f64<float>(double d) {
    return (float)d;
}
template <> __device__ __forceinline__ double tg_from_f64<double>(double d) {
    return d;
}
template <> __device__ __forceinline__ tg_half tg_from_f64<tg_half>(double d) {
    return tg_d2h(d);
}
template <> __device__ __forceinline__ tg_bf16 tg_from_f64<tg_bf16>(double d) {
    return tg_d2b(d);
}

template <typename O> __device__ __forceinline__ O tg_from_i64(long long v) {
    return (O)v;  // integers wrap; float and double round to nearest
}
template <> __device__ __forceinline__ tg_half tg_from_i64<tg_half>(long long v) {
    return tg_d2h((double)v);
}
template <> __device__ __forceinline__ tg_bf16 tg_from_i64<tg_bf16>(long long v) {
    return tg_d2b((double)v);
}

template <typename O, typename I> struct TgCast {
    __device__ __forceinline__ O operator()(I x) const {
        if (tg_is_float<I>::value) return tg_from_f64<O>((double)tg_to_acc<I>(x));
        return tg_from_i64<O>((long long)tg_to_acc<I>(x));
    }
};
// same dtype: the bits as they are (NaN payloads included), as the cpu copies
template <typename T> struct TgCast<T, T> {
    __device__ __forceinline__ T operator()(T x) const { return x; }
};
template <typename I> struct TgCastBool {
    __device__ __forceinline__ unsigned char operator()(I x) const {
        return tg_to_acc<I>(x) != 0 ? 1 : 0;
    }
};
template <> struct TgCastBool<unsigned char> {  // bool -> bool (and u8 -> bool)
    __device__ __forceinline__ unsigned char operator()(unsigned char x) const {
        return x != 0 ? 1 : 0;
    }
};

// ---------------------------------------------------------------------------
// Arithmetic on the compute types (long long for integers, float for
// f16/bf16/f32, double for f64). Integer results are truncated to the
// storage width afterwards, which makes them wrap like the cpu's.

#define TG_ULL(x) ((unsigned long long)(x))

struct TgAdd {
    static __device__ __forceinline__ long long f(long long a, long long b) { return (long long)(TG_ULL(a) + TG_ULL(b)); }
    static __device__ __forceinline__ float f(float a, float b) { return a + b; }
    static __device__ __forceinline__ double f(double a, double b) { return a + b; }
};
struct TgSub {
    static __device__ __forceinline__ long long f(long long a, long long b) { return (long long)(TG_ULL(a) - TG_ULL(b)); }
    static __device__ __forceinline__ float f(float a, float b) { return a - b; }
    static __device__ __forceinline__ double f(double a, double b) { return a - b; }
};
struct TgMul {
    static __device__ __forceinline__ long long f(long long a, long long b) { return (long long)(TG_ULL(a) * TG_ULL(b)); }
    static __device__ __forceinline__ float f(float a, float b) { return a * b; }
    static __device__ __forceinline__ double f(double a, double b) { return a * b; }
};
struct TgDiv {
    // integer division truncates; x / 0 is 0; x / -1 wraps (MIN / -1 == MIN)
    static __device__ __forceinline__ long long f(long long a, long long b) {
        if (b == 0) return 0;
        if (b == -1) return (long long)(0ULL - TG_ULL(a));
        return a / b;
    }
    static __device__ __forceinline__ float f(float a, float b) { return a / b; }
    static __device__ __forceinline__ double f(double a, double b) { return a / b; }
};
struct TgPow {
    // wrapping power; a negative exponent gives 0 (Binary reports it as a
    // fault first); the exponent is capped at u32::MAX like Rust's
    // wrapping_pow(e.min(u32::MAX))
    static __device__ __forceinline__ long long f(long long a, long long e) {
        if (e < 0) return 0;
        unsigned long long k = e > TG_U32_MAX ? (unsigned long long)TG_U32_MAX : (unsigned long long)e;
        unsigned long long base = TG_ULL(a), r = 1;
        while (k) {
            if (k & 1) r *= base;
            base *= base;
            k >>= 1;
        }
        return (long long)r;
    }
    static __device__ __forceinline__ float f(float a, float b) { return powf(a, b); }
    static __device__ __forceinline__ double f(double a, double b) { return pow(a, b); }
};
struct TgMaximum {
    template <typename X> static __device__ __forceinline__ X f(X a, X b) {
        if (a != a) return a;
        if (b != b) return b;
        return b > a ? b : a;
    }
};
struct TgMinimum {
    template <typename X> static __device__ __forceinline__ X f(X a, X b) {
        if (a != a) return a;
        if (b != b) return b;
        return b < a ? b : a;
    }
};
struct TgEq {
    template <typename X> static __device__ __forceinline__ bool f(X a, X b) { return a == b; }
};
struct TgNe {
    template <typename X> static __device__ __forceinline__ bool f(X a, X b) { return a != b; }
};
struct TgLt {
    template <typename X> static __device__ __forceinline__ bool f(X a, X b) { return a < b; }
};
struct TgLe {
    template <typename X> static __device__ __forceinline__ bool f(X a, X b) { return a <= b; }
};
struct TgGt {
    template <typename X> static __device__ __forceinline__ bool f(X a, X b) { return a > b; }
};
struct TgGe {
    template <typename X> static __device__ __forceinline__ bool f(X a, X b) { return a >= b; }
};

struct TgNeg {
    static __device__ __forceinline__ long long f(long long a) { return (long long)(0ULL - TG_ULL(a)); }
    static __device__ __forceinline__ float f(float a) { return -a; }
    static __device__ __forceinline__ double f(double a) { return -a; }
};
struct TgAbs {
    static __device__ __forceinline__ long long f(long long a) { return a < 0 ? (long long)(0ULL - TG_ULL(a)) : a; }
    static __device__ __forceinline__ float f(float a) { return fabsf(a); }
    static __device__ __forceinline__ double f(double a) { return fabs(a); }
};
struct TgRelu {
    // NaN stays NaN; `>=` keeps -0.0
    template <typename X> static __device__ __forceinline__ X f(X a) { return (a != a || a >= (X)0) ? a : (X)0; }
};
struct TgExp {
    static __device__ __forceinline__ float f(float a) { return expf(a); }
    static __device__ __forceinline__ double f(double a) { return exp(a); }
};
struct TgLog {
    static __device__ __forceinline__ float f(float a) { return logf(a); }
    static __device__ __forceinline__ double f(double a) { return log(a); }
};
struct TgSqrt {
    static __device__ __forceinline__ float f(float a) { return sqrtf(a); }
    static __device__ __forceinline__ double f(double a) { return sqrt(a); }
};
struct TgSigmoid {
    static __device__ __forceinline__ float f(float a) { return 1.0f / (1.0f + expf(-a)); }
    static __device__ __forceinline__ double f(double a) { return 1.0 / (1.0 + exp(-a)); }
};
struct TgTanh {
    static __device__ __forceinline__ float f(float a) { return tanhf(a); }
    static __device__ __forceinline__ double f(double a) { return tanh(a); }
};
struct TgErf {
    static __device__ __forceinline__ float f(float a) { return erff(a); }
    static __device__ __forceinline__ double f(double a) { return erf(a); }
};

// Functors on storage values -----------------------------------------------

template <typename T, typename Op> struct TgUn {
    __device__ __forceinline__ T operator()(T a) const { return tg_from_acc<T>(Op::f(tg_to_acc<T>(a))); }
};
template <typename T, typename Op> struct TgBin {
    __device__ __forceinline__ T operator()(T a, T b) const {
        return tg_from_acc<T>(Op::f(tg_to_acc<T>(a), tg_to_acc<T>(b)));
    }
};
template <typename T, typename Op> struct TgCmp {
    __device__ __forceinline__ unsigned char operator()(T a, T b) const {
        return Op::f(tg_to_acc<T>(a), tg_to_acc<T>(b)) ? 1 : 0;
    }
};
// integer pow of two tensors: a negative exponent is reported (the cpu
// refuses it before computing) and gives 0
template <typename T> struct TgPowChecked {
    FaultRecord* rec;
    unsigned long long launch;
    __device__ __forceinline__ T operator()(T a, T b) const {
        long long e = tg_to_acc<T>(b);
        if (e < 0) tg_fault(rec, launch, TG_FAULT_NEG_POW, e, 0, 0);
        return tg_from_acc<T>(TgPow::f(tg_to_acc<T>(a), e));
    }
};
template <typename T, typename Op> struct TgBinS {
    T s;
    int rev;
    __device__ __forceinline__ T operator()(T a) const {
        typename Acc<T>::type x = tg_to_acc<T>(a), y = tg_to_acc<T>(s);
        return tg_from_acc<T>(rev ? Op::f(y, x) : Op::f(x, y));
    }
};
template <typename T, typename Op> struct TgCmpS {
    T s;
    int rev;
    __device__ __forceinline__ unsigned char operator()(T a) const {
        typename Acc<T>::type x = tg_to_acc<T>(a), y = tg_to_acc<T>(s);
        return (rev ? Op::f(y, x) : Op::f(x, y)) ? 1 : 0;
    }
};
// the bounds are compared in the compute type; the result is the input or
// a bound as stored, so nothing is rounded (NaN stays NaN)
template <typename T> struct TgClamp {
    T lo, hi;
    int has_lo, has_hi;
    __device__ __forceinline__ T operator()(T a) const {
        T v = a;
        if (has_lo && tg_to_acc<T>(v) < tg_to_acc<T>(lo)) v = lo;
        if (has_hi && tg_to_acc<T>(v) > tg_to_acc<T>(hi)) v = hi;
        return v;
    }
};
template <typename T> struct TgConst {
    T v;
    __device__ __forceinline__ T operator()() const { return v; }
};
template <typename T> struct TgWhere {
    __device__ __forceinline__ T operator()(unsigned char c, T a, T b) const { return c != 0 ? a : b; }
};
template <typename T> struct TgMaskedFill {
    T v;
    __device__ __forceinline__ T operator()(T a, unsigned char m) const { return m != 0 ? v : a; }
};

// ---------------------------------------------------------------------------
// Kernel definitions

#define TG_K0(NAME, O, EXTRA, FUNC)                                                                   \
    extern "C" __global__ void NAME(long long n, int vec, O* o EXTRA) {                                \
        tg_map0<tg_vn<O>()>(n, vec, o, FUNC);                                                           \
    }                                                                                                   \
    extern "C" __global__ void NAME##_s(long long n, O* o, Strided os EXTRA) { tg_map0_s(n, o, os, FUNC); }

#define TG_K1(NAME, O, A, EXTRA, FUNC)                                                                \
    extern "C" __global__ void NAME(long long n, int vec, O* o, const A* a EXTRA) {                    \
        tg_map1<tg_vn<O, A>()>(n, vec, o, a, FUNC);                                                     \
    }                                                                                                   \
    extern "C" __global__ void NAME##_s(long long n, O* o, Strided os, const A* a, Strided as EXTRA) { \
        tg_map1_s(n, o, os, a, as, FUNC);                                                               \
    }

#define TG_K2(NAME, O, A, B, EXTRA, FUNC)                                                             \
    extern "C" __global__ void NAME(long long n, int vec, O* o, const A* a, const B* b EXTRA) {        \
        tg_map2<tg_vn<O, A, B>()>(n, vec, o, a, b, FUNC);                                               \
    }                                                                                                   \
    extern "C" __global__ void NAME##_s(long long n, O* o, Strided os, const A* a, Strided as,         \
                                        const B* b, Strided bs EXTRA) {                                 \
        tg_map2_s(n, o, os, a, as, b, bs, FUNC);                                                        \
    }

#define TG_K3(NAME, O, A, B, C, EXTRA, FUNC)                                                          \
    extern "C" __global__ void NAME(long long n, int vec, O* o, const A* a, const B* b,                \
                                    const C* c EXTRA) {                                                 \
        tg_map3<tg_vn<O, A, B, C>()>(n, vec, o, a, b, c, FUNC);                                         \
    }                                                                                                   \
    extern "C" __global__ void NAME##_s(long long n, O* o, Strided os, const A* a, Strided as,         \
                                        const B* b, Strided bs, const C* c, Strided cs EXTRA) {         \
        tg_map3_s(n, o, os, a, as, b, bs, c, cs, FUNC);                                                 \
    }

#define TG_COMMA ,
#define TG_NOEXTRA
#define TG_FAULT_EXTRA TG_COMMA FaultRecord* rec TG_COMMA unsigned long long launch
#define TG_SCALAR_EXTRA(T) TG_COMMA T s TG_COMMA int rev
#define TG_CLAMP_EXTRA(T) TG_COMMA T lo TG_COMMA T hi TG_COMMA int has_lo TG_COMMA int has_hi
#define TG_VALUE_EXTRA(T) TG_COMMA T value

// The unary kernels (TgUn over each functor above) are not written here:
// source.rs appends their TG_K1 lines to this text, generated from the rows
// of device/unary.rs (Note [One table per op family]).

// Kernels are grouped in parts (TG_PART, set by nvrtc.rs with -DTG_PART=k)
// so a process compiles only the parts it uses; without TG_PART every part
// is compiled. elementwise.rs (`part`) maps a kernel name to its part.
#ifdef TG_PART
#define TG_WANT(k) (TG_PART == (k))
#else
#define TG_WANT(k) 1
#endif

// Part 0: fill, where, masked_fill by element size (x8, x16, x32, x64).
#if TG_WANT(0)
TG_K0(tg_fill_x8, unsigned char, TG_VALUE_EXTRA(unsigned char), (TgConst<unsigned char>{value}))
TG_K3(tg_where_x8, unsigned char, unsigned char, unsigned char, unsigned char, TG_NOEXTRA, (TgWhere<unsigned char>()))
TG_K2(tg_masked_fill_x8, unsigned char, unsigned char, unsigned char, TG_VALUE_EXTRA(unsigned char), (TgMaskedFill<unsigned char>{value}))
TG_K0(tg_fill_x16, unsigned short, TG_VALUE_EXTRA(unsigned short), (TgConst<unsigned short>{value}))
TG_K3(tg_where_x16, unsigned short, unsigned char, unsigned short, unsigned short, TG_NOEXTRA, (TgWhere<unsigned short>()))
TG_K2(tg_masked_fill_x16, unsigned short, unsigned short, unsigned char, TG_VALUE_EXTRA(unsigned short), (TgMaskedFill<unsigned short>{value}))
TG_K0(tg_fill_x32, unsigned int, TG_VALUE_EXTRA(unsigned int), (TgConst<unsigned int>{value}))
TG_K3(tg_where_x32, unsigned int, unsigned char, unsigned int, unsigned int, TG_NOEXTRA, (TgWhere<unsigned int>()))
TG_K2(tg_masked_fill_x32, unsigned int, unsigned int, unsigned char, TG_VALUE_EXTRA(unsigned int), (TgMaskedFill<unsigned int>{value}))
TG_K0(tg_fill_x64, unsigned long long, TG_VALUE_EXTRA(unsigned long long), (TgConst<unsigned long long>{value}))
TG_K3(tg_where_x64, unsigned long long, unsigned char, unsigned long long, unsigned long long, TG_NOEXTRA, (TgWhere<unsigned long long>()))
TG_K2(tg_masked_fill_x64, unsigned long long, unsigned long long, unsigned char, TG_VALUE_EXTRA(unsigned long long), (TgMaskedFill<unsigned long long>{value}))
#endif

// Part 1: copy into bool: tg_copy_bool_<in>.
#if TG_WANT(1)
TG_K1(tg_copy_bool_bool, unsigned char, unsigned char, TG_NOEXTRA, (TgCastBool<unsigned char>()))
TG_K1(tg_copy_bool_u8, unsigned char, unsigned char, TG_NOEXTRA, (TgCastBool<unsigned char>()))
TG_K1(tg_copy_bool_i32, unsigned char, int, TG_NOEXTRA, (TgCastBool<int>()))
TG_K1(tg_copy_bool_i64, unsigned char, long long, TG_NOEXTRA, (TgCastBool<long long>()))
TG_K1(tg_copy_bool_f16, unsigned char, tg_half, TG_NOEXTRA, (TgCastBool<tg_half>()))
TG_K1(tg_copy_bool_bf16, unsigned char, tg_bf16, TG_NOEXTRA, (TgCastBool<tg_bf16>()))
TG_K1(tg_copy_bool_f32, unsigned char, float, TG_NOEXTRA, (TgCastBool<float>()))
TG_K1(tg_copy_bool_f64, unsigned char, double, TG_NOEXTRA, (TgCastBool<double>()))
#endif

// Part 2: copy into u8: tg_copy_u8_<in>.
#if TG_WANT(2)
TG_K1(tg_copy_u8_bool, unsigned char, unsigned char, TG_NOEXTRA, (TgCast<unsigned char, unsigned char>()))
TG_K1(tg_copy_u8_u8, unsigned char, unsigned char, TG_NOEXTRA, (TgCast<unsigned char, unsigned char>()))
TG_K1(tg_copy_u8_i32, unsigned char, int, TG_NOEXTRA, (TgCast<unsigned char, int>()))
TG_K1(tg_copy_u8_i64, unsigned char, long long, TG_NOEXTRA, (TgCast<unsigned char, long long>()))
TG_K1(tg_copy_u8_f16, unsigned char, tg_half, TG_NOEXTRA, (TgCast<unsigned char, tg_half>()))
TG_K1(tg_copy_u8_bf16, unsigned char, tg_bf16, TG_NOEXTRA, (TgCast<unsigned char, tg_bf16>()))
TG_K1(tg_copy_u8_f32, unsigned char, float, TG_NOEXTRA, (TgCast<unsigned char, float>()))
TG_K1(tg_copy_u8_f64, unsigned char, double, TG_NOEXTRA, (TgCast<unsigned char, double>()))
#endif

// Part 3: copy into i32: tg_copy_i32_<in>.
#if TG_WANT(3)
TG_K1(tg_copy_i32_bool, int, unsigned char, TG_NOEXTRA, (TgCast<int, unsigned char>()))
TG_K1(tg_copy_i32_u8, int, unsigned char, TG_NOEXTRA, (TgCast<int, unsigned char>()))
TG_K1(tg_copy_i32_i32, int, int, TG_NOEXTRA, (TgCast<int, int>()))
TG_K1(tg_copy_i32_i64, int, long long, TG_NOEXTRA, (TgCast<int, long long>()))
TG_K1(tg_copy_i32_f16, int, tg_half, TG_NOEXTRA, (TgCast<int, tg_half>()))
TG_K1(tg_copy_i32_bf16, int, tg_bf16, TG_NOEXTRA, (TgCast<int, tg_bf16>()))
TG_K1(tg_copy_i32_f32, int, float, TG_NOEXTRA, (TgCast<int, float>()))
TG_K1(tg_copy_i32_f64, int, double, TG_NOEXTRA, (TgCast<int, double>()))
#endif

// Part 4: copy into i64: tg_copy_i64_<in>.
#if TG_WANT(4)
TG_K1(tg_copy_i64_bool, long long, unsigned char, TG_NOEXTRA, (TgCast<long long, unsigned char>()))
TG_K1(tg_copy_i64_u8, long long, unsigned char, TG_NOEXTRA, (TgCast<long long, unsigned char>()))
TG_K1(tg_copy_i64_i32, long long, int, TG_NOEXTRA, (TgCast<long long, int>()))
TG_K1(tg_copy_i64_i64, long long, long long, TG_NOEXTRA, (TgCast<long long, long long>()))
TG_K1(tg_copy_i64_f16, long long, tg_half, TG_NOEXTRA, (TgCast<long long, tg_half>()))
TG_K1(tg_copy_i64_bf16, long long, tg_bf16, TG_NOEXTRA, (TgCast<long long, tg_bf16>()))
TG_K1(tg_copy_i64_f32, long long, float, TG_NOEXTRA, (TgCast<long long, float>()))
TG_K1(tg_copy_i64_f64, long long, double, TG_NOEXTRA, (TgCast<long long, double>()))
#endif

// Part 5: copy into f16: tg_copy_f16_<in>.
#if TG_WANT(5)
TG_K1(tg_copy_f16_bool, tg_half, unsigned char, TG_NOEXTRA, (TgCast<tg_half, unsigned char>()))
TG_K1(tg_copy_f16_u8, tg_half, unsigned char, TG_NOEXTRA, (TgCast<tg_half, unsigned char>()))
TG_K1(tg_copy_f16_i32, tg_half, int, TG_NOEXTRA, (TgCast<tg_half, int>()))
TG_K1(tg_copy_f16_i64, tg_half, long long, TG_NOEXTRA, (TgCast<tg_half, long long>()))
TG_K1(tg_copy_f16_f16, tg_half, tg_half, TG_NOEXTRA, (TgCast<tg_half, tg_half>()))
TG_K1(tg_copy_f16_bf16, tg_half, tg_bf16, TG_NOEXTRA, (TgCast<tg_half, tg_bf16>()))
TG_K1(tg_copy_f16_f32, tg_half, float, TG_NOEXTRA, (TgCast<tg_half, float>()))
TG_K1(tg_copy_f16_f64, tg_half, double, TG_NOEXTRA, (TgCast<tg_half, double>()))
#endif

// Part 6: copy into bf16: tg_copy_bf16_<in>.
#if TG_WANT(6)
TG_K1(tg_copy_bf16_bool, tg_bf16, unsigned char, TG_NOEXTRA, (TgCast<tg_bf16, unsigned char>()))
TG_K1(tg_copy_bf16_u8, tg_bf16, unsigned char, TG_NOEXTRA, (TgCast<tg_bf16, unsigned char>()))
TG_K1(tg_copy_bf16_i32, tg_bf16, int, TG_NOEXTRA, (TgCast<tg_bf16, int>()))
TG_K1(tg_copy_bf16_i64, tg_bf16, long long, TG_NOEXTRA, (TgCast<tg_bf16, long long>()))
TG_K1(tg_copy_bf16_f16, tg_bf16, tg_half, TG_NOEXTRA, (TgCast<tg_bf16, tg_half>()))
TG_K1(tg_copy_bf16_bf16, tg_bf16, tg_bf16, TG_NOEXTRA, (TgCast<tg_bf16, tg_bf16>()))
TG_K1(tg_copy_bf16_f32, tg_bf16, float, TG_NOEXTRA, (TgCast<tg_bf16, float>()))
TG_K1(tg_copy_bf16_f64, tg_bf16, double, TG_NOEXTRA, (TgCast<tg_bf16, double>()))
#endif

// Part 7: copy into f32: tg_copy_f32_<in>.
#if TG_WANT(7)
TG_K1(tg_copy_f32_bool, float, unsigned char, TG_NOEXTRA, (TgCast<float, unsigned char>()))
TG_K1(tg_copy_f32_u8, float, unsigned char, TG_NOEXTRA, (TgCast<float, unsigned char>()))
TG_K1(tg_copy_f32_i32, float, int, TG_NOEXTRA, (TgCast<float, int>()))
TG_K1(tg_copy_f32_i64, float, long long, TG_NOEXTRA, (TgCast<float, long long>()))
TG_K1(tg_copy_f32_f16, float, tg_half, TG_NOEXTRA, (TgCast<float, tg_half>()))
TG_K1(tg_copy_f32_bf16, float, tg_bf16, TG_NOEXTRA, (TgCast<float, tg_bf16>()))
TG_K1(tg_copy_f32_f32, float, float, TG_NOEXTRA, (TgCast<float, float>()))
TG_K1(tg_copy_f32_f64, float, double, TG_NOEXTRA, (TgCast<float, double>()))
#endif

// Part 8: copy into f64: tg_copy_f64_<in>.
#if TG_WANT(8)
TG_K1(tg_copy_f64_bool, double, unsigned char, TG_NOEXTRA, (TgCast<double, unsigned char>()))
TG_K1(tg_copy_f64_u8, double, unsigned char, TG_NOEXTRA, (TgCast<double, unsigned char>()))
TG_K1(tg_copy_f64_i32, double, int, TG_NOEXTRA, (TgCast<double, int>()))
TG_K1(tg_copy_f64_i64, double, long long, TG_NOEXTRA, (TgCast<double, long long>()))
TG_K1(tg_copy_f64_f16, double, tg_half, TG_NOEXTRA, (TgCast<double, tg_half>()))
TG_K1(tg_copy_f64_bf16, double, tg_bf16, TG_NOEXTRA, (TgCast<double, tg_bf16>()))
TG_K1(tg_copy_f64_f32, double, float, TG_NOEXTRA, (TgCast<double, float>()))
TG_K1(tg_copy_f64_f64, double, double, TG_NOEXTRA, (TgCast<double, double>()))
#endif

// Part 9: binary, binary with a scalar, clamp (and the generated unary kernels) on u8 (bool runs as u8).
#if TG_WANT(9)
TG_K2(tg_add_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgBin<unsigned char, TgAdd>()))
TG_K1(tg_add_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgBinS<unsigned char, TgAdd>{s, rev}))
TG_K2(tg_sub_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgBin<unsigned char, TgSub>()))
TG_K1(tg_sub_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgBinS<unsigned char, TgSub>{s, rev}))
TG_K2(tg_mul_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgBin<unsigned char, TgMul>()))
TG_K1(tg_mul_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgBinS<unsigned char, TgMul>{s, rev}))
TG_K2(tg_div_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgBin<unsigned char, TgDiv>()))
TG_K1(tg_div_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgBinS<unsigned char, TgDiv>{s, rev}))
TG_K2(tg_pow_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgPowChecked<unsigned char>{rec, launch}))
TG_K1(tg_pow_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgBinS<unsigned char, TgPow>{s, rev}))
TG_K2(tg_maximum_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgBin<unsigned char, TgMaximum>()))
TG_K1(tg_maximum_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgBinS<unsigned char, TgMaximum>{s, rev}))
TG_K2(tg_minimum_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgBin<unsigned char, TgMinimum>()))
TG_K1(tg_minimum_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgBinS<unsigned char, TgMinimum>{s, rev}))
TG_K2(tg_eq_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgCmp<unsigned char, TgEq>()))
TG_K1(tg_eq_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgCmpS<unsigned char, TgEq>{s, rev}))
TG_K2(tg_ne_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgCmp<unsigned char, TgNe>()))
TG_K1(tg_ne_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgCmpS<unsigned char, TgNe>{s, rev}))
TG_K2(tg_lt_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgCmp<unsigned char, TgLt>()))
TG_K1(tg_lt_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgCmpS<unsigned char, TgLt>{s, rev}))
TG_K2(tg_le_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgCmp<unsigned char, TgLe>()))
TG_K1(tg_le_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgCmpS<unsigned char, TgLe>{s, rev}))
TG_K2(tg_gt_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgCmp<unsigned char, TgGt>()))
TG_K1(tg_gt_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgCmpS<unsigned char, TgGt>{s, rev}))
TG_K2(tg_ge_u8, unsigned char, unsigned char, unsigned char, TG_FAULT_EXTRA, (TgCmp<unsigned char, TgGe>()))
TG_K1(tg_ge_scalar_u8, unsigned char, unsigned char, TG_SCALAR_EXTRA(unsigned char), (TgCmpS<unsigned char, TgGe>{s, rev}))
TG_K1(tg_clamp_u8, unsigned char, unsigned char, TG_CLAMP_EXTRA(unsigned char), (TgClamp<unsigned char>{lo, hi, has_lo, has_hi}))
#endif

// Part 10: binary, binary with a scalar, clamp (and the generated unary kernels) on i32 (bool runs as u8).
#if TG_WANT(10)
TG_K2(tg_add_i32, int, int, int, TG_FAULT_EXTRA, (TgBin<int, TgAdd>()))
TG_K1(tg_add_scalar_i32, int, int, TG_SCALAR_EXTRA(int), (TgBinS<int, TgAdd>{s, rev}))
TG_K2(tg_sub_i32, int, int, int, TG_FAULT_EXTRA, (TgBin<int, TgSub>()))
TG_K1(tg_sub_scalar_i32, int, int, TG_SCALAR_EXTRA(int), (TgBinS<int, TgSub>{s, rev}))
TG_K2(tg_mul_i32, int, int, int, TG_FAULT_EXTRA, (TgBin<int, TgMul>()))
TG_K1(tg_mul_scalar_i32, int, int, TG_SCALAR_EXTRA(int), (TgBinS<int, TgMul>{s, rev}))
TG_K2(tg_div_i32, int, int, int, TG_FAULT_EXTRA, (TgBin<int, TgDiv>()))
TG_K1(tg_div_scalar_i32, int, int, TG_SCALAR_EXTRA(int), (TgBinS<int, TgDiv>{s, rev}))
TG_K2(tg_pow_i32, int, int, int, TG_FAULT_EXTRA, (TgPowChecked<int>{rec, launch}))
TG_K1(tg_pow_scalar_i32, int, int, TG_SCALAR_EXTRA(int), (TgBinS<int, TgPow>{s, rev}))
TG_K2(tg_maximum_i32, int, int, int, TG_FAULT_EXTRA, (TgBin<int, TgMaximum>()))
TG_K1(tg_maximum_scalar_i32, int, int, TG_SCALAR_EXTRA(int), (TgBinS<int, TgMaximum>{s, rev}))
TG_K2(tg_minimum_i32, int, int, int, TG_FAULT_EXTRA, (TgBin<int, TgMinimum>()))
TG_K1(tg_minimum_scalar_i32, int, int, TG_SCALAR_EXTRA(int), (TgBinS<int, TgMinimum>{s, rev}))
TG_K2(tg_eq_i32, unsigned char, int, int, TG_FAULT_EXTRA, (TgCmp<int, TgEq>()))
TG_K1(tg_eq_scalar_i32, unsigned char, int, TG_SCALAR_EXTRA(int), (TgCmpS<int, TgEq>{s, rev}))
TG_K2(tg_ne_i32, unsigned char, int, int, TG_FAULT_EXTRA, (TgCmp<int, TgNe>()))
TG_K1(tg_ne_scalar_i32, unsigned char, int, TG_SCALAR_EXTRA(int), (TgCmpS<int, TgNe>{s, rev}))
TG_K2(tg_lt_i32, unsigned char, int, int, TG_FAULT_EXTRA, (TgCmp<int, TgLt>()))
TG_K1(tg_lt_scalar_i32, unsigned char, int, TG_SCALAR_EXTRA(int), (TgCmpS<int, TgLt>{s, rev}))
TG_K2(tg_le_i32, unsigned char, int, int, TG_FAULT_EXTRA, (TgCmp<int, TgLe>()))
TG_K1(tg_le_scalar_i32, unsigned char, int, TG_SCALAR_EXTRA(int), (TgCmpS<int, TgLe>{s, rev}))
TG_K2(tg_gt_i32, unsigned char, int, int, TG_FAULT_EXTRA, (TgCmp<int, TgGt>()))
TG_K1(tg_gt_scalar_i32, unsigned char, int, TG_SCALAR_EXTRA(int), (TgCmpS<int, TgGt>{s, rev}))
TG_K2(tg_ge_i32, unsigned char, int, int, TG_FAULT_EXTRA, (TgCmp<int, TgGe>()))
TG_K1(tg_ge_scalar_i32, unsigned char, int, TG_SCALAR_EXTRA(int), (TgCmpS<int, TgGe>{s, rev}))
TG_K1(tg_clamp_i32, int, int, TG_CLAMP_EXTRA(int), (TgClamp<int>{lo, hi, has_lo, has_hi}))
#endif

// Part 11: binary, binary with a scalar, clamp (and the generated unary kernels) on i64 (bool runs as u8).
#if TG_WANT(11)
TG_K2(tg_add_i64, long long, long long, long long, TG_FAULT_EXTRA, (TgBin<long long, TgAdd>()))
TG_K1(tg_add_scalar_i64, long long, long long, TG_SCALAR_EXTRA(long long), (TgBinS<long long, TgAdd>{s, rev}))
TG_K2(tg_sub_i64, long long, long long, long long, TG_FAULT_EXTRA, (TgBin<long long, TgSub>()))
TG_K1(tg_sub_scalar_i64, long long, long long, TG_SCALAR_EXTRA(long long), (TgBinS<long long, TgSub>{s, rev}))
TG_K2(tg_mul_i64, long long, long long, long long, TG_FAULT_EXTRA, (TgBin<long long, TgMul>()))
TG_K1(tg_mul_scalar_i64, long long, long long, TG_SCALAR_EXTRA(long long), (TgBinS<long long, TgMul>{s, rev}))
TG_K2(tg_div_i64, long long, long long, long long, TG_FAULT_EXTRA, (TgBin<long long, TgDiv>()))
TG_K1(tg_div_scalar_i64, long long, long long, TG_SCALAR_EXTRA(long long), (TgBinS<long long, TgDiv>{s, rev}))
TG_K2(tg_pow_i64, long long, long long, long long, TG_FAULT_EXTRA, (TgPowChecked<long long>{rec, launch}))
TG_K1(tg_pow_scalar_i64, long long, long long, TG_SCALAR_EXTRA(long long), (TgBinS<long long, TgPow>{s, rev}))
TG_K2(tg_maximum_i64, long long, long long, long long, TG_FAULT_EXTRA, (TgBin<long long, TgMaximum>()))
TG_K1(tg_maximum_scalar_i64, long long, long long, TG_SCALAR_EXTRA(long long), (TgBinS<long long, TgMaximum>{s, rev}))
TG_K2(tg_minimum_i64, long long, long long, long long, TG_FAULT_EXTRA, (TgBin<long long, TgMinimum>()))
TG_K1(tg_minimum_scalar_i64, long long, long long, TG_SCALAR_EXTRA(long long), (TgBinS<long long, TgMinimum>{s, rev}))
TG_K2(tg_eq_i64, unsigned char, long long, long long, TG_FAULT_EXTRA, (TgCmp<long long, TgEq>()))
TG_K1(tg_eq_scalar_i64, unsigned char, long long, TG_SCALAR_EXTRA(long long), (TgCmpS<long long, TgEq>{s, rev}))
TG_K2(tg_ne_i64, unsigned char, long long, long long, TG_FAULT_EXTRA, (TgCmp<long long, TgNe>()))
TG_K1(tg_ne_scalar_i64, unsigned char, long long, TG_SCALAR_EXTRA(long long), (TgCmpS<long long, TgNe>{s, rev}))
TG_K2(tg_lt_i64, unsigned char, long long, long long, TG_FAULT_EXTRA, (TgCmp<long long, TgLt>()))
TG_K1(tg_lt_scalar_i64, unsigned char, long long, TG_SCALAR_EXTRA(long long), (TgCmpS<long long, TgLt>{s, rev}))
TG_K2(tg_le_i64, unsigned char, long long, long long, TG_FAULT_EXTRA, (TgCmp<long long, TgLe>()))
TG_K1(tg_le_scalar_i64, unsigned char, long long, TG_SCALAR_EXTRA(long long), (TgCmpS<long long, TgLe>{s, rev}))
TG_K2(tg_gt_i64, unsigned char, long long, long long, TG_FAULT_EXTRA, (TgCmp<long long, TgGt>()))
TG_K1(tg_gt_scalar_i64, unsigned char, long long, TG_SCALAR_EXTRA(long long), (TgCmpS<long long, TgGt>{s, rev}))
TG_K2(tg_ge_i64, unsigned char, long long, long long, TG_FAULT_EXTRA, (TgCmp<long long, TgGe>()))
TG_K1(tg_ge_scalar_i64, unsigned char, long long, TG_SCALAR_EXTRA(long long), (TgCmpS<long long, TgGe>{s, rev}))
TG_K1(tg_clamp_i64, long long, long long, TG_CLAMP_EXTRA(long long), (TgClamp<long long>{lo, hi, has_lo, has_hi}))
#endif

// Part 12: binary, binary with a scalar, clamp (and the generated unary kernels) on f16 (bool runs as u8).
#if TG_WANT(12)
TG_K2(tg_add_f16, tg_half, tg_half, tg_half, TG_FAULT_EXTRA, (TgBin<tg_half, TgAdd>()))
TG_K1(tg_add_scalar_f16, tg_half, tg_half, TG_SCALAR_EXTRA(tg_half), (TgBinS<tg_half, TgAdd>{s, rev}))
TG_K2(tg_sub_f16, tg_half, tg_half, tg_half, TG_FAULT_EXTRA, (TgBin<tg_half, TgSub>()))
TG_K1(tg_sub_scalar_f16, tg_half, tg_half, TG_SCALAR_EXTRA(tg_half), (TgBinS<tg_half, TgSub>{s, rev}))
TG_K2(tg_mul_f16, tg_half, tg_half, tg_half, TG_FAULT_EXTRA, (TgBin<tg_half, TgMul>()))
TG_K1(tg_mul_scalar_f16, tg_half, tg_half, TG_SCALAR_EXTRA(tg_half), (TgBinS<tg_half, TgMul>{s, rev}))
TG_K2(tg_div_f16, tg_half, tg_half, tg_half, TG_FAULT_EXTRA, (TgBin<tg_half, TgDiv>()))
TG_K1(tg_div_scalar_f16, tg_half, tg_half, TG_SCALAR_EXTRA(tg_half), (TgBinS<tg_half, TgDiv>{s, rev}))
TG_K2(tg_pow_f16, tg_half, tg_half, tg_half, TG_FAULT_EXTRA, (TgBin<tg_half, TgPow>()))
TG_K1(tg_pow_scalar_f16, tg_half, tg_half, TG_SCALAR_EXTRA(tg_half), (TgBinS<tg_half, TgPow>{s, rev}))
TG_K2(tg_maximum_f16, tg_half, tg_half, tg_half, TG_FAULT_EXTRA, (TgBin<tg_half, TgMaximum>()))
TG_K1(tg_maximum_scalar_f16, tg_half, tg_half, TG_SCALAR_EXTRA(tg_half), (TgBinS<tg_half, TgMaximum>{s, rev}))
TG_K2(tg_minimum_f16, tg_half, tg_half, tg_half, TG_FAULT_EXTRA, (TgBin<tg_half, TgMinimum>()))
TG_K1(tg_minimum_scalar_f16, tg_half, tg_half, TG_SCALAR_EXTRA(tg_half), (TgBinS<tg_half, TgMinimum>{s, rev}))
TG_K2(tg_eq_f16, unsigned char, tg_half, tg_half, TG_FAULT_EXTRA, (TgCmp<tg_half, TgEq>()))
TG_K1(tg_eq_scalar_f16, unsigned char, tg_half, TG_SCALAR_EXTRA(tg_half), (TgCmpS<tg_half, TgEq>{s, rev}))
TG_K2(tg_ne_f16, unsigned char, tg_half, tg_half, TG_FAULT_EXTRA, (TgCmp<tg_half, TgNe>()))
TG_K1(tg_ne_scalar_f16, unsigned char, tg_half, TG_SCALAR_EXTRA(tg_half), (TgCmpS<tg_half, TgNe>{s, rev}))
TG_K2(tg_lt_f16, unsigned char, tg_half, tg_half, TG_FAULT_EXTRA, (TgCmp<tg_half, TgLt>()))
TG_K1(tg_lt_scalar_f16, unsigned char, tg_half, TG_SCALAR_EXTRA(tg_half), (TgCmpS<tg_half, TgLt>{s, rev}))
TG_K2(tg_le_f16, unsigned char, tg_half, tg_half, TG_FAULT_EXTRA, (TgCmp<tg_half, TgLe>()))
TG_K1(tg_le_scalar_f16, unsigned char, tg_half, TG_SCALAR_EXTRA(tg_half), (TgCmpS<tg_half, TgLe>{s, rev}))
TG_K2(tg_gt_f16, unsigned char, tg_half, tg_half, TG_FAULT_EXTRA, (TgCmp<tg_half, TgGt>()))
TG_K1(tg_gt_scalar_f16, unsigned char, tg_half, TG_SCALAR_EXTRA(tg_half), (TgCmpS<tg_half, TgGt>{s, rev}))
TG_K2(tg_ge_f16, unsigned char, tg_half, tg_half, TG_FAULT_EXTRA, (TgCmp<tg_half, TgGe>()))
TG_K1(tg_ge_scalar_f16, unsigned char, tg_half, TG_SCALAR_EXTRA(tg_half), (TgCmpS<tg_half, TgGe>{s, rev}))
TG_K1(tg_clamp_f16, tg_half, tg_half, TG_CLAMP_EXTRA(tg_half), (TgClamp<tg_half>{lo, hi, has_lo, has_hi}))
#endif

// Part 13: binary, binary with a scalar, clamp (and the generated unary kernels) on bf16 (bool runs as u8).
#if TG_WANT(13)
TG_K2(tg_add_bf16, tg_bf16, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgBin<tg_bf16, TgAdd>()))
TG_K1(tg_add_scalar_bf16, tg_bf16, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgBinS<tg_bf16, TgAdd>{s, rev}))
TG_K2(tg_sub_bf16, tg_bf16, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgBin<tg_bf16, TgSub>()))
TG_K1(tg_sub_scalar_bf16, tg_bf16, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgBinS<tg_bf16, TgSub>{s, rev}))
TG_K2(tg_mul_bf16, tg_bf16, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgBin<tg_bf16, TgMul>()))
TG_K1(tg_mul_scalar_bf16, tg_bf16, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgBinS<tg_bf16, TgMul>{s, rev}))
TG_K2(tg_div_bf16, tg_bf16, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgBin<tg_bf16, TgDiv>()))
TG_K1(tg_div_scalar_bf16, tg_bf16, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgBinS<tg_bf16, TgDiv>{s, rev}))
TG_K2(tg_pow_bf16, tg_bf16, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgBin<tg_bf16, TgPow>()))
TG_K1(tg_pow_scalar_bf16, tg_bf16, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgBinS<tg_bf16, TgPow>{s, rev}))
TG_K2(tg_maximum_bf16, tg_bf16, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgBin<tg_bf16, TgMaximum>()))
TG_K1(tg_maximum_scalar_bf16, tg_bf16, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgBinS<tg_bf16, TgMaximum>{s, rev}))
TG_K2(tg_minimum_bf16, tg_bf16, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgBin<tg_bf16, TgMinimum>()))
TG_K1(tg_minimum_scalar_bf16, tg_bf16, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgBinS<tg_bf16, TgMinimum>{s, rev}))
TG_K2(tg_eq_bf16, unsigned char, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgCmp<tg_bf16, TgEq>()))
TG_K1(tg_eq_scalar_bf16, unsigned char, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgCmpS<tg_bf16, TgEq>{s, rev}))
TG_K2(tg_ne_bf16, unsigned char, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgCmp<tg_bf16, TgNe>()))
TG_K1(tg_ne_scalar_bf16, unsigned char, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgCmpS<tg_bf16, TgNe>{s, rev}))
TG_K2(tg_lt_bf16, unsigned char, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgCmp<tg_bf16, TgLt>()))
TG_K1(tg_lt_scalar_bf16, unsigned char, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgCmpS<tg_bf16, TgLt>{s, rev}))
TG_K2(tg_le_bf16, unsigned char, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgCmp<tg_bf16, TgLe>()))
TG_K1(tg_le_scalar_bf16, unsigned char, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgCmpS<tg_bf16, TgLe>{s, rev}))
TG_K2(tg_gt_bf16, unsigned char, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgCmp<tg_bf16, TgGt>()))
TG_K1(tg_gt_scalar_bf16, unsigned char, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgCmpS<tg_bf16, TgGt>{s, rev}))
TG_K2(tg_ge_bf16, unsigned char, tg_bf16, tg_bf16, TG_FAULT_EXTRA, (TgCmp<tg_bf16, TgGe>()))
TG_K1(tg_ge_scalar_bf16, unsigned char, tg_bf16, TG_SCALAR_EXTRA(tg_bf16), (TgCmpS<tg_bf16, TgGe>{s, rev}))
TG_K1(tg_clamp_bf16, tg_bf16, tg_bf16, TG_CLAMP_EXTRA(tg_bf16), (TgClamp<tg_bf16>{lo, hi, has_lo, has_hi}))
#endif

// Part 14: binary, binary with a scalar, clamp (and the generated unary kernels) on f32 (bool runs as u8).
#if TG_WANT(14)
TG_K2(tg_add_f32, float, float, float, TG_FAULT_EXTRA, (TgBin<float, TgAdd>()))
TG_K1(tg_add_scalar_f32, float, float, TG_SCALAR_EXTRA(float), (TgBinS<float, TgAdd>{s, rev}))
TG_K2(tg_sub_f32, float, float, float, TG_FAULT_EXTRA, (TgBin<float, TgSub>()))
TG_K1(tg_sub_scalar_f32, float, float, TG_SCALAR_EXTRA(float), (TgBinS<float, TgSub>{s, rev}))
TG_K2(tg_mul_f32, float, float, float, TG_FAULT_EXTRA, (TgBin<float, TgMul>()))
TG_K1(tg_mul_scalar_f32, float, float, TG_SCALAR_EXTRA(float), (TgBinS<float, TgMul>{s, rev}))
TG_K2(tg_div_f32, float, float, float, TG_FAULT_EXTRA, (TgBin<float, TgDiv>()))
TG_K1(tg_div_scalar_f32, float, float, TG_SCALAR_EXTRA(float), (TgBinS<float, TgDiv>{s, rev}))
TG_K2(tg_pow_f32, float, float, float, TG_FAULT_EXTRA, (TgBin<float, TgPow>()))
TG_K1(tg_pow_scalar_f32, float, float, TG_SCALAR_EXTRA(float), (TgBinS<float, TgPow>{s, rev}))
TG_K2(tg_maximum_f32, float, float, float, TG_FAULT_EXTRA, (TgBin<float, TgMaximum>()))
TG_K1(tg_maximum_scalar_f32, float, float, TG_SCALAR_EXTRA(float), (TgBinS<float, TgMaximum>{s, rev}))
TG_K2(tg_minimum_f32, float, float, float, TG_FAULT_EXTRA, (TgBin<float, TgMinimum>()))
TG_K1(tg_minimum_scalar_f32, float, float, TG_SCALAR_EXTRA(float), (TgBinS<float, TgMinimum>{s, rev}))
TG_K2(tg_eq_f32, unsigned char, float, float, TG_FAULT_EXTRA, (TgCmp<float, TgEq>()))
TG_K1(tg_eq_scalar_f32, unsigned char, float, TG_SCALAR_EXTRA(float), (TgCmpS<float, TgEq>{s, rev}))
TG_K2(tg_ne_f32, unsigned char, float, float, TG_FAULT_EXTRA, (TgCmp<float, TgNe>()))
TG_K1(tg_ne_scalar_f32, unsigned char, float, TG_SCALAR_EXTRA(float), (TgCmpS<float, TgNe>{s, rev}))
TG_K2(tg_lt_f32, unsigned char, float, float, TG_FAULT_EXTRA, (TgCmp<float, TgLt>()))
TG_K1(tg_lt_scalar_f32, unsigned char, float, TG_SCALAR_EXTRA(float), (TgCmpS<float, TgLt>{s, rev}))
TG_K2(tg_le_f32, unsigned char, float, float, TG_FAULT_EXTRA, (TgCmp<float, TgLe>()))
TG_K1(tg_le_scalar_f32, unsigned char, float, TG_SCALAR_EXTRA(float), (TgCmpS<float, TgLe>{s, rev}))
TG_K2(tg_gt_f32, unsigned char, float, float, TG_FAULT_EXTRA, (TgCmp<float, TgGt>()))
TG_K1(tg_gt_scalar_f32, unsigned char, float, TG_SCALAR_EXTRA(float), (TgCmpS<float, TgGt>{s, rev}))
TG_K2(tg_ge_f32, unsigned char, float, float, TG_FAULT_EXTRA, (TgCmp<float, TgGe>()))
TG_K1(tg_ge_scalar_f32, unsigned char, float, TG_SCALAR_EXTRA(float), (TgCmpS<float, TgGe>{s, rev}))
TG_K1(tg_clamp_f32, float, float, TG_CLAMP_EXTRA(float), (TgClamp<float>{lo, hi, has_lo, has_hi}))
#endif

// Part 15: binary, binary with a scalar, clamp (and the generated unary kernels) on f64 (bool runs as u8).
#if TG_WANT(15)
TG_K2(tg_add_f64, double, double, double, TG_FAULT_EXTRA, (TgBin<double, TgAdd>()))
TG_K1(tg_add_scalar_f64, double, double, TG_SCALAR_EXTRA(double), (TgBinS<double, TgAdd>{s, rev}))
TG_K2(tg_sub_f64, double, double, double, TG_FAULT_EXTRA, (TgBin<double, TgSub>()))
TG_K1(tg_sub_scalar_f64, double, double, TG_SCALAR_EXTRA(double), (TgBinS<double, TgSub>{s, rev}))
TG_K2(tg_mul_f64, double, double, double, TG_FAULT_EXTRA, (TgBin<double, TgMul>()))
TG_K1(tg_mul_scalar_f64, double, double, TG_SCALAR_EXTRA(double), (TgBinS<double, TgMul>{s, rev}))
TG_K2(tg_div_f64, double, double, double, TG_FAULT_EXTRA, (TgBin<double, TgDiv>()))
TG_K1(tg_div_scalar_f64, double, double, TG_SCALAR_EXTRA(double), (TgBinS<double, TgDiv>{s, rev}))
TG_K2(tg_pow_f64, double, double, double, TG_FAULT_EXTRA, (TgBin<double, TgPow>()))
TG_K1(tg_pow_scalar_f64, double, double, TG_SCALAR_EXTRA(double), (TgBinS<double, TgPow>{s, rev}))
TG_K2(tg_maximum_f64, double, double, double, TG_FAULT_EXTRA, (TgBin<double, TgMaximum>()))
TG_K1(tg_maximum_scalar_f64, double, double, TG_SCALAR_EXTRA(double), (TgBinS<double, TgMaximum>{s, rev}))
TG_K2(tg_minimum_f64, double, double, double, TG_FAULT_EXTRA, (TgBin<double, TgMinimum>()))
TG_K1(tg_minimum_scalar_f64, double, double, TG_SCALAR_EXTRA(double), (TgBinS<double, TgMinimum>{s, rev}))
TG_K2(tg_eq_f64, unsigned char, double, double, TG_FAULT_EXTRA, (TgCmp<double, TgEq>()))
TG_K1(tg_eq_scalar_f64, unsigned char, double, TG_SCALAR_EXTRA(double), (TgCmpS<double, TgEq>{s, rev}))
TG_K2(tg_ne_f64, unsigned char, double, double, TG_FAULT_EXTRA, (TgCmp<double, TgNe>()))
TG_K1(tg_ne_scalar_f64, unsigned char, double, TG_SCALAR_EXTRA(double), (TgCmpS<double, TgNe>{s, rev}))
TG_K2(tg_lt_f64, unsigned char, double, double, TG_FAULT_EXTRA, (TgCmp<double, TgLt>()))
TG_K1(tg_lt_scalar_f64, unsigned char, double, TG_SCALAR_EXTRA(double), (TgCmpS<double, TgLt>{s, rev}))
TG_K2(tg_le_f64, unsigned char, double, double, TG_FAULT_EXTRA, (TgCmp<double, TgLe>()))
TG_K1(tg_le_scalar_f64, unsigned char, double, TG_SCALAR_EXTRA(double), (TgCmpS<double, TgLe>{s, rev}))
TG_K2(tg_gt_f64, unsigned char, double, double, TG_FAULT_EXTRA, (TgCmp<double, TgGt>()))
TG_K1(tg_gt_scalar_f64, unsigned char, double, TG_SCALAR_EXTRA(double), (TgCmpS<double, TgGt>{s, rev}))
TG_K2(tg_ge_f64, unsigned char, double, double, TG_FAULT_EXTRA, (TgCmp<double, TgGe>()))
TG_K1(tg_ge_scalar_f64, unsigned char, double, TG_SCALAR_EXTRA(double), (TgCmpS<double, TgGe>{s, rev}))
TG_K1(tg_clamp_f64, double, double, TG_CLAMP_EXTRA(double), (TgClamp<double>{lo, hi, has_lo, has_hi}))
#endif
