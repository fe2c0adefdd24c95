// common.cuh: prepended to every CUDA source of tensorguard before NVRTC
// compiles it (nvrtc.rs, Source::text). Self-contained: no CUDA header is
// included, so NVRTC needs none.
//
// C type per DType: Bool -> unsigned char (0/1), U8 -> unsigned char,
// I32 -> int, I64 -> long long, F16 -> tg_half, BF16 -> tg_bf16,
// F32 -> float, F64 -> double.

#define TG_MAX_DIMS 8

// A view's layout as a kernel parameter (mirror: launch.rs, Strided).
// Offset and strides are in elements; shape[ndim-1] is the fastest dim.
struct Strided {
    long long offset;
    int ndim;
    int pad_;
    long long shape[TG_MAX_DIMS];
    long long strides[TG_MAX_DIMS];
};

// The element offset (from the buffer start, offset included) of the
// `linear`-th element of the view, in row-major order of s.shape. The loop
// uses constant indices only, so the struct stays in parameter space.
__device__ __forceinline__ long long tg_offset(const Strided& s, long long linear) {
    long long off = s.offset;
#pragma unroll
    for (int d = TG_MAX_DIMS - 1; d >= 0; --d) {
        if (d < s.ndim) {
            long long n = s.shape[d];
            long long q = linear / n;
            off += (linear - q * n) * s.strides[d];
            linear = q;
        }
    }
    return off;
}

// Where kernels report bad values (mirror: mod.rs, FaultRecord). It lives
// in mapped pinned host memory.
struct FaultRecord {
    unsigned int code;
    unsigned int pad_;
    unsigned long long launch;
    long long a, b, c;
};

// index out of range: a = the index value, b = the size of the dim, c = the dim
#define TG_FAULT_INDEX 1
// an integer raised to a negative integer power: a = the exponent
#define TG_FAULT_NEG_POW 2

// First fault wins: the code is claimed with a compare-and-swap from 0, then
// the launch number and the values are written and made visible to the host.
__device__ __noinline__ void tg_fault(FaultRecord* rec, unsigned long long launch, unsigned int code,
                                      long long a, long long b, long long c) {
    if (atomicCAS(&rec->code, 0u, code) == 0u) {
        rec->launch = launch;
        rec->a = a;
        rec->b = b;
        rec->c = c;
        __threadfence_system();
    }
}

// 16-bit floats without CUDA headers: distinct structs, so overloads work.
struct tg_half {
    unsigned short x;
};
struct tg_bf16 {
    unsigned short x;
};

__device__ __forceinline__ unsigned int tg_f2u(float f) {
    unsigned int u;
    asm("mov.b32 %0, %1;" : "=r"(u) : "f"(f));
    return u;
}
__device__ __forceinline__ float tg_u2f(unsigned int u) {
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u));
    return f;
}
__device__ __forceinline__ unsigned long long tg_d2u(double d) {
    unsigned long long u;
    asm("mov.b64 %0, %1;" : "=l"(u) : "d"(d));
    return u;
}
__device__ __forceinline__ double tg_u2d(unsigned long long u) {
    double d;
    asm("mov.b64 %0, %1;" : "=d"(d) : "l"(u));
    return d;
}

// f16 <-> f32 by PTX cvt (exact one way, round to nearest even the other).
__device__ __forceinline__ float tg_h2f(tg_half h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x));
    return f;
}
__device__ __forceinline__ tg_half tg_f2h(float f) {
    tg_half h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
    return h;
}

// bf16 <-> f32 by bit operations, as the `half` crate does: round to
// nearest even, a NaN stays a (quiet) NaN.
__device__ __forceinline__ float tg_b2f(tg_bf16 b) {
    return tg_u2f(((unsigned int)b.x) << 16);
}
__device__ __forceinline__ tg_bf16 tg_f2b(float f) {
    unsigned int u = tg_f2u(f);
    tg_bf16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        b.x = (unsigned short)((u >> 16) | 0x40u);
        return b;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    b.x = (unsigned short)(u >> 16);
    return b;
}

// f64 -> f16 as the cpu does it on x86 (`half` with F16C): through f32.
__device__ __forceinline__ tg_half tg_d2h(double d) {
    return tg_f2h((float)d);
}
// f64 -> bf16 as the `half` crate does it: the low 32 bits of the f64 are
// dropped, then the value is rounded to nearest even (through f32, which
// holds the remaining 21 significant bits exactly).
__device__ __forceinline__ tg_bf16 tg_d2b(double d) {
    return tg_f2b((float)tg_u2d(tg_d2u(d) & 0xffffffff00000000ull));
}

// The compute ("accumulate") type of each storage type.
template <typename T> struct Acc {
    typedef T type;
};
template <> struct Acc<tg_half> {
    typedef float type;
};
template <> struct Acc<tg_bf16> {
    typedef float type;
};
template <> struct Acc<int> {
    typedef long long type;
};
template <> struct Acc<unsigned char> {
    typedef long long type;
};

// Storage -> compute type and back (integers truncate, 16-bit floats round
// to nearest even).
template <typename T> __device__ __forceinline__ typename Acc<T>::type tg_to_acc(T v) {
    return (typename Acc<T>::type)v;
}
template <> __device__ __forceinline__ float tg_to_acc<tg_half>(tg_half v) {
    return tg_h2f(v);
}
template <> __device__ __forceinline__ float tg_to_acc<tg_bf16>(tg_bf16 v) {
    return tg_b2f(v);
}
template <typename T> __device__ __forceinline__ T tg_from_acc(typename Acc<T>::type v) {
    return (T)v;
}
template <> __device__ __forceinline__ tg_half tg_from_acc<tg_half>(float v) {
    return tg_f2h(v);
}
template <> __device__ __forceinline__ tg_bf16 tg_from_acc<tg_bf16>(float v) {
    return tg_f2b(v);
}

template <typename T> __device__ __forceinline__ typename Acc<T>::type tg_load(const T* p) {
    return tg_to_acc<T>(*p);
}
template <typename T> __device__ __forceinline__ void tg_store(T* p, typename Acc<T>::type v) {
    *p = tg_from_acc<T>(v);
}
