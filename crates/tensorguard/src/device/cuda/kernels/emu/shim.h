// Host emulation of the CUDA features reduce.cu and index.cu use, for
// kernels_test.cpp (run by reduce.rs's `kernels_run_under_host_emulation`
// when g++ is available): one block at a time, one std::thread per CUDA
// thread, a barrier for every warp shuffle and __syncthreads, so the
// segment and block reductions run as they would on a GPU.
#include <cstdio>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <thread>
#include <barrier>
#include <vector>
#include <atomic>
#include <functional>
#define __device__
#define __global__
#define __forceinline__ inline
#define __noinline__
#define __shared__ static
struct dim3_ { unsigned x, y, z; };
thread_local dim3_ threadIdx, blockIdx;
dim3_ blockDim, gridDim;
std::barrier<>* g_bar;
unsigned long long g_slot[1024];
inline void __syncthreads() { g_bar->arrive_and_wait(); }
template <typename T> T __shfl_xor_sync(unsigned, T v, int o) {
    static_assert(sizeof(T) <= 8);
    unsigned long long b = 0; memcpy(&b, &v, sizeof(T));
    g_slot[threadIdx.x] = b;
    g_bar->arrive_and_wait();
    unsigned long long r = g_slot[threadIdx.x ^ o];
    g_bar->arrive_and_wait();
    T out; memcpy(&out, &r, sizeof(T)); return out;
}
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, 8); return i; }
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) { __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return cmp; }
inline float atomicAdd(float* p, float v) { float o = *p; float n; do { n = o + v; } while (!__atomic_compare_exchange(p, &o, &n, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)); return o; }
inline double atomicAdd(double* p, double v) { double o = *p; double n; do { n = o + v; } while (!__atomic_compare_exchange(p, &o, &n, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)); return o; }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline void __threadfence_system() {}
// run kernel f over grid x block
inline void launch(unsigned grid, unsigned block, std::function<void()> f) {
    gridDim = {grid, 1, 1}; blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        std::barrier<> bar(block); g_bar = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < block; ++t) ts.emplace_back([=] { threadIdx = {t, 0, 0}; blockIdx = {b, 0, 0}; f(); });
        for (auto& t : ts) t.join();
    }
}
