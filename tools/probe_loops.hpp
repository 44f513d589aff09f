// The inner loops of the probes (bandwidth_probe.hpp, peak_probe.hpp), one per instruction
// set. The tools are built for baseline x86-64 like the library, so each loop is compiled for its
// own target and picked at run time, as the kernels are: a probe that reads with SSE2 while the
// kernels read with AVX-512 measures the loop, not the machine. Exposed so tests can check every
// variant the CPU has, not only the one the probes pick.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qjit_tools {

// A streaming sum of 64-bit words.
struct ReadLoop {
    const char* name;  // "avx512", "avx2", "sse2": the width of its loads
    uint64_t (*sum)(const uint64_t* words, size_t count);  // any alignment and count
};

// The read loops this CPU runs, widest first (SSE2 is always there).
std::vector<ReadLoop> supported_read_loops();
inline ReadLoop best_read_loop() { return supported_read_loops().front(); }

// A register-resident loop of independent u8 x s8 dot products (the int8 kernels' instruction).
struct DotLoop {
    const char* name;                 // the instruction, e.g. "vpdpbusd zmm"
    int64_t macs_per_iteration;       // multiply-adds of one iteration: bytes multiplied
    // Runs `iterations` iterations on accumulators that start at 0, multiplying every unsigned byte
    // of the broadcast word `a` by the signed byte of `b` at the same place. Returns the sum of all
    // int32 accumulator lanes, each macs_per_iteration / 4 of them being iterations * (the dot
    // product of a's and b's four bytes) without saturation (the AVX2 loop saturates pairs of
    // products at int16, so that holds there for small bytes only).
    int64_t (*run)(int64_t iterations, uint32_t a, uint32_t b);
};

// The dot-product loops this CPU runs, fastest first (none without AVX2).
std::vector<DotLoop> supported_dot_loops();
// Loops of fp32 multiply-adds in the same form (macs_per_iteration: lanes times chains; a and b
// unused), widest first; the SSE2 one (a multiply and an add) is always there.
std::vector<DotLoop> supported_fma_loops();

}  // namespace qjit_tools
