// Host version of common.cuh's interface (INFRA.md) for the emulation
// harness kernels_test.cpp: the same definitions, with software f16
// conversions instead of PTX.
#define TG_MAX_DIMS 8
struct Strided { long long offset; int ndim; int pad_; long long shape[TG_MAX_DIMS]; long long strides[TG_MAX_DIMS]; };
__device__ __forceinline__ long long tg_offset(const Strided& s, long long linear) {
    long long off = s.offset;
    for (int d = s.ndim - 1; d >= 0; --d) {
        long long n = s.shape[d];
        off += (linear % n) * s.strides[d];
        linear /= n;
    }
    return off;
}
struct FaultRecord { unsigned int code; unsigned int pad_; unsigned long long launch; long long a, b, c; };
__device__ void tg_fault(FaultRecord* rec, unsigned long long launch, unsigned int code, long long a, long long b, long long c) {
    if (atomicCAS(&rec->code, 0u, code) == 0u) {
        rec->launch = launch; rec->a = a; rec->b = b; rec->c = c;
        __threadfence_system();
    }
}
#define TG_FAULT_INDEX 1
struct tg_half { unsigned short x; };
struct tg_bf16 { unsigned short x; };
__device__ float tg_h2f(tg_half h) { _Float16 v; memcpy(&v, &h.x, 2); return (float)v; }
__device__ tg_half tg_f2h(float f) { _Float16 v = (_Float16)f; tg_half h; memcpy(&h.x, &v, 2); return h; }
__device__ float tg_b2f(tg_bf16 b) { return __uint_as_float(((unsigned int)b.x) << 16); }
__device__ tg_bf16 tg_f2b(float f) {
    unsigned int u = __float_as_uint(f); tg_bf16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) { b.x = (unsigned short)((u >> 16) | 0x40u); return b; }
    u += 0x7fffu + ((u >> 16) & 1u); b.x = (unsigned short)(u >> 16); return b;
}
template <typename T> struct Acc { typedef T type; };
template <> struct Acc<tg_half> { typedef float type; };
template <> struct Acc<tg_bf16> { typedef float type; };
template <> struct Acc<int> { typedef long long type; };
template <> struct Acc<unsigned char> { typedef long long type; };
template <typename T> __device__ __forceinline__ typename Acc<T>::type tg_load(const T* p) { return (typename Acc<T>::type)(*p); }
template <> __device__ __forceinline__ float tg_load<tg_half>(const tg_half* p) { return tg_h2f(*p); }
template <> __device__ __forceinline__ float tg_load<tg_bf16>(const tg_bf16* p) { return tg_b2f(*p); }
template <typename T> __device__ __forceinline__ void tg_store(T* p, typename Acc<T>::type v) { *p = (T)v; }
template <> __device__ __forceinline__ void tg_store<tg_half>(tg_half* p, float v) { *p = tg_f2h(v); }
template <> __device__ __forceinline__ void tg_store<tg_bf16>(tg_bf16* p, float v) { *p = tg_f2b(v); }
