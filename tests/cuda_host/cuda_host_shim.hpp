// Compiles the CUDA C++ that jit/cuda/cuda_source.hpp generates as host C++ and runs it on the
// CPU, so that the kernels' logic (indexing, decoding, scales, reductions, fragment layouts) is
// tested against the oracle on machines without a GPU. Force-included ahead of a generated source
// (g++ -include), it defines QJIT_HOST_EMULATION, which swaps the source's inline-PTX helpers for
// the ones below.
//
// The model: one block at a time, each CUDA thread a fiber (ucontext) on one OS thread, switched
// only at synchronization points, so runs are deterministic. __syncthreads is a barrier of the
// block; each warp-wide instruction (shuffle, ldmatrix, mma) is an exchange between the warp's 32
// fibers through a barrier of the warp. Each PTX helper follows its documented semantics: fp16
// arithmetic rounds to nearest even once per operation, mma.m16n8k16 and ldmatrix.x4 distribute
// fragments as the PTX ISA's figures show, cp.async copies at once (so its commit and wait are
// no-ops). What emulation cannot show is speed, or a fault only the hardware raises (a misaligned
// vector access, a read past the end of a device allocation).
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "base/half.hpp"

#define QJIT_HOST_EMULATION 1
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(threads)
#define __shared__ static  // one block runs at a time: a static is the block's shared variable
#define QJIT_DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(qjit_host::dynamic_shared())

struct uint2 {
    unsigned x, y;
};
struct uint4 {
    unsigned x, y, z, w;
};
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

namespace qjit_host {

constexpr int kWarpSize = 32;
constexpr size_t kFiberStackBytes = 256 * 1024;

[[noreturn]] inline void die(const char* why) {
    std::fprintf(stderr, "qjit host emulation: %s\n", why);
    std::abort();
}

// Fibers meeting at a barrier: the last live member to arrive releases the others.
struct Barrier {
    int members = 0, arrived = 0;
    uint64_t phase = 0;
    void release_if_complete() {
        if (arrived > 0 && arrived == members) arrived = 0, ++phase;
    }
};

// What the lanes of a warp exchange in one warp-wide instruction; two sets, alternating by the
// barrier's phase, so a lane may fill the next exchange's slot while others still read this one.
struct LaneSlot {
    uint64_t value = 0;
    const void* address = nullptr;
    uint32_t a[4] = {}, b[2] = {};
};

struct Warp {
    Barrier barrier;
    LaneSlot slots[2][kWarpSize];
};

struct Fiber {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    bool done = false;
};

struct Scheduler {
    ucontext_t main;
    std::vector<Fiber> fibers;
    Barrier block_barrier;
    std::vector<Warp> warps;
    std::vector<uint4> shared;  // dynamic shared memory, 16-byte aligned
    int current = 0;
    uint64_t arrivals = 0;  // every arrival at a barrier and every exit: a round without one is a deadlock
    void (*call)(void*) = nullptr;
    void* call_context = nullptr;
};

inline Scheduler scheduler;
inline dim3 thread_index, block_index, block_dim, grid_dim;

inline void* dynamic_shared() { return scheduler.shared.data(); }
inline int lane() { return int(thread_index.x) % kWarpSize; }
inline Warp& warp() { return scheduler.warps[thread_index.x / kWarpSize]; }

// Back to the scheduler until `barrier` has moved past `phase`.
inline void wait(Barrier& barrier) {
    const uint64_t phase = barrier.phase;
    ++barrier.arrived;
    ++scheduler.arrivals;
    barrier.release_if_complete();
    while (barrier.phase == phase) swapcontext(&scheduler.fibers[size_t(scheduler.current)].context, &scheduler.main);
}

// Publishes this lane's slot, waits for the warp, then reads every lane's with `read`.
template <typename Fill, typename Read>
auto exchange(Fill fill, Read read) {
    Warp& w = warp();
    LaneSlot* slots = w.slots[w.barrier.phase % 2];
    fill(slots[lane()]);
    wait(w.barrier);
    return read(static_cast<const LaneSlot*>(slots));
}

inline void fiber_main() {
    Scheduler& s = scheduler;
    s.call(s.call_context);
    // An exited thread stops counting at its warp's and its block's barriers.
    Warp& w = warp();
    --w.barrier.members;
    w.barrier.release_if_complete();
    --s.block_barrier.members;
    s.block_barrier.release_if_complete();
    s.fibers[size_t(s.current)].done = true;
    ++s.arrivals;
}

// Runs `call` as the threads of each block of the grid in turn: every fiber runs until it waits
// or returns, round after round, until all have returned.
inline void launch(dim3 grid, unsigned threads, size_t shared_bytes, void (*call)(void*), void* call_context) {
    Scheduler& s = scheduler;
    grid_dim = grid;
    block_dim = {threads, 1, 1};
    s.call = call, s.call_context = call_context;
    if (s.fibers.size() < threads) s.fibers.resize(threads);
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                block_index = {x, y, z};
                s.shared.assign(shared_bytes / 16 + 1, uint4{});
                s.block_barrier = {int(threads), 0, 0};
                s.warps.assign((threads + kWarpSize - 1) / kWarpSize, Warp{});
                for (unsigned first = 0; first < threads; first += kWarpSize)
                    s.warps[first / kWarpSize].barrier.members = int(std::min<unsigned>(kWarpSize, threads - first));
                for (unsigned t = 0; t < threads; ++t) {
                    Fiber& fiber = s.fibers[t];
                    if (!fiber.stack) fiber.stack.reset(new char[kFiberStackBytes]);
                    getcontext(&fiber.context);
                    fiber.context.uc_stack.ss_sp = fiber.stack.get();
                    fiber.context.uc_stack.ss_size = kFiberStackBytes;
                    fiber.context.uc_link = &s.main;
                    makecontext(&fiber.context, fiber_main, 0);
                    fiber.done = false;
                }
                for (unsigned left = threads; left > 0;) {
                    const uint64_t arrivals = s.arrivals;
                    for (unsigned t = 0; t < threads; ++t) {
                        if (s.fibers[t].done) continue;
                        s.current = int(t);
                        thread_index = {t, 0, 0};
                        swapcontext(&s.main, &s.fibers[t].context);
                        if (s.fibers[t].done) --left;
                    }
                    if (left > 0 && s.arrivals == arrivals)
                        die("deadlock: every live thread waits at a barrier that cannot complete");
                }
            }
}

inline float to_float(uint16_t bits, bool bf16) { return bf16 ? qjit::bf16_to_float(bits) : qjit::half_to_float(bits); }

// D (16 x 8) += A (16 x 16, row) B (16 x 8, col), fragments as in the PTX ISA: lane 4g + t holds
// A rows g and g + 8 at columns 2t, 2t + 1 (a0, a1) and 2t + 8, 2t + 9 (a2, a3), B rows 2t, 2t + 1
// (b0) and 2t + 8, 2t + 9 (b1) of column g, and D rows g, g + 8 at columns 2t, 2t + 1.
inline void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
    struct Fragments {
        float a[16][16], b[16][8];
    };
    const Fragments f = exchange(
        [&](LaneSlot& slot) {
            std::memcpy(slot.a, a, sizeof slot.a);
            slot.b[0] = b0, slot.b[1] = b1;
        },
        [&](const LaneSlot* slots) {
            Fragments out;
            for (int l = 0; l < kWarpSize; ++l) {
                const int g = l / 4, t = l % 4;
                const LaneSlot& s = slots[l];
                for (int half = 0; half < 2; ++half) {
                    out.a[g][2 * t + half] = to_float(uint16_t(s.a[0] >> (16 * half)), bf16);
                    out.a[g + 8][2 * t + half] = to_float(uint16_t(s.a[1] >> (16 * half)), bf16);
                    out.a[g][2 * t + 8 + half] = to_float(uint16_t(s.a[2] >> (16 * half)), bf16);
                    out.a[g + 8][2 * t + 8 + half] = to_float(uint16_t(s.a[3] >> (16 * half)), bf16);
                    out.b[2 * t + half][g] = to_float(uint16_t(s.b[0] >> (16 * half)), bf16);
                    out.b[2 * t + 8 + half][g] = to_float(uint16_t(s.b[1] >> (16 * half)), bf16);
                }
            }
            return out;
        });
    const int g = lane() / 4, t = lane() % 4;
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
        double sum = c[e];
        for (int k = 0; k < 16; ++k) sum += double(f.a[row][k]) * double(f.b[k][col]);
        c[e] = float(sum);
    }
}

}  // namespace qjit_host

#define threadIdx (qjit_host::thread_index)
#define blockIdx (qjit_host::block_index)
#define blockDim (qjit_host::block_dim)
#define gridDim (qjit_host::grid_dim)

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float __uint_as_float(unsigned v) {
    float f;
    std::memcpy(&f, &v, sizeof f);
    return f;
}
template <typename T>
inline T __ldg(const T* p) {
    return *p;
}
inline float atomicAdd(float* p, float v) {  // one fiber runs at a time
    const float old = *p;
    *p = old + v;
    return old;
}
inline void __syncthreads() { qjit_host::wait(qjit_host::scheduler.block_barrier); }
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int offset) {
    static_assert(sizeof(T) <= sizeof(uint64_t));
    return qjit_host::exchange([&](qjit_host::LaneSlot& slot) { std::memcpy(&slot.value, &v, sizeof v); },
                               [&](const qjit_host::LaneSlot* slots) {
                                   T out;
                                   std::memcpy(&out, &slots[qjit_host::lane() ^ offset].value, sizeof out);
                                   return out;
                               });
}

// The prelude's PTX helpers (jit/cuda/cuda_source.cpp).
inline unsigned and_or(unsigned a, unsigned b, unsigned c) { return (a & b) | c; }
inline float half_to_float(unsigned short h) { return qjit::half_to_float(h); }
inline unsigned short float_to_f16(float f) { return qjit::float_to_half(f); }
inline unsigned short float_to_bf16(float f) { return qjit::float_to_bf16(f); }
inline unsigned pack_bf16(float lo, float hi) { return unsigned(float_to_bf16(lo)) | unsigned(float_to_bf16(hi)) << 16; }
// fp16x2 arithmetic: each half computed exactly in double, then rounded once to fp16.
template <typename Op>
inline unsigned half2_op(unsigned a, unsigned b, unsigned c, Op op) {
    unsigned out = 0;
    for (int half = 0; half < 2; ++half) {
        const int shift = 16 * half;
        const double value = op(double(half_to_float(uint16_t(a >> shift))), double(half_to_float(uint16_t(b >> shift))),
                                double(half_to_float(uint16_t(c >> shift))));
        out |= unsigned(qjit::float_to_half(float(value))) << shift;
    }
    return out;
}
inline unsigned hsub2(unsigned a, unsigned b) {
    return half2_op(a, b, 0, [](double x, double y, double) { return x - y; });
}
inline unsigned hmul2(unsigned a, unsigned b) {
    return half2_op(a, b, 0, [](double x, double y, double) { return x * y; });
}
inline unsigned hfma2(unsigned a, unsigned b, unsigned c) {
    return half2_op(a, b, c, [](double x, double y, double z) { return x * y + z; });
}
inline uint4 load_stream(const void* p) {
    uint4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void mma_m16n8k16_f16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    qjit_host::mma_m16n8k16(c, a, b0, b1, false);
}
inline void mma_m16n8k16_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    qjit_host::mma_m16n8k16(c, a, b0, b1, true);
}
inline void copy_async_16(void* dst, const void* src, bool valid) {
    if (valid) std::memcpy(dst, src, 16);
    else std::memset(dst, 0, 16);
}
inline void commit_async() {}
template <int Pending>
inline void wait_async() {}
// ldmatrix.x4: lanes 8j .. 8j + 7 give the row addresses of 8x8 matrix j; lane 4r + c receives
// row r, elements 2c and 2c + 1 of each matrix, one register per matrix.
inline void load_matrix_x4(unsigned (&r)[4], const void* p) {
    struct Rows {
        unsigned r[4];
    };
    const int l = qjit_host::lane();
    const Rows rows = qjit_host::exchange([&](qjit_host::LaneSlot& slot) { slot.address = p; },
                                          [&](const qjit_host::LaneSlot* slots) {
                                              Rows out;
                                              for (int j = 0; j < 4; ++j)
                                                  std::memcpy(&out.r[j],
                                                              static_cast<const uint16_t*>(slots[8 * j + l / 4].address) +
                                                                  2 * (l % 4),
                                                              4);
                                              return out;
                                          });
    std::memcpy(r, rows.r, sizeof r);
}

// The entry the test harness calls (tests/cuda_host/host_module.hpp): runs call(context) as the
// threads of a grid. The launcher lives in the kernel's own library, beside the thread-local
// indices its kernels read.
extern "C" __attribute__((visibility("default"))) void qjit_host_launch(unsigned grid_x, unsigned grid_y,
                                                                         unsigned grid_z, unsigned threads,
                                                                         size_t shared_bytes, void (*call)(void*),
                                                                         void* context) {
    qjit_host::launch({grid_x, grid_y, grid_z}, threads, shared_bytes, call, context);
}
