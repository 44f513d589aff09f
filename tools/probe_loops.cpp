#include "tools/probe_loops.hpp"

#include <cpuid.h>
#include <immintrin.h>

#include "base/float_vectors.hpp"

namespace qjit_tools {

namespace {

// Read loops. Eight independent vector accumulators: eight loads (eight cache lines with
// AVX-512) in flight per iteration and no dependency chain longer than one add per iteration.
// Unaligned loads: as fast as aligned ones on aligned data, and any slice works.
constexpr size_t kReadVectors = 8;

// Each iteration also prefetches the lines it will read 1 KiB later. On the 2-core Zen 5 VM, in
// the hours when 2 threads could read only 40-50 GB/s, the AVX-512 loop without it read 38-40,
// below the SSE2 loop, and 45-50 with it; when 2 threads read 75-80 GB/s it changes nothing.
// A prefetch past the end of the buffer never faults.
constexpr size_t kPrefetchBytes = 1024;

template <size_t StepBytes>
[[gnu::always_inline]] inline void prefetch_ahead(const uint64_t* block) {
    const char* ahead = reinterpret_cast<const char*>(block) + kPrefetchBytes;
    for (size_t line = 0; line < StepBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
}

__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint64_t* words, size_t count) {
    constexpr size_t kLanes = 8;
    __m512i acc[kReadVectors];
    for (__m512i& a : acc) a = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + kReadVectors * kLanes <= count; i += kReadVectors * kLanes) {
        prefetch_ahead<kReadVectors * 64>(words + i);
#pragma GCC unroll 8
        for (size_t j = 0; j < kReadVectors; ++j)
            acc[j] = _mm512_add_epi64(acc[j], _mm512_loadu_si512(words + i + j * kLanes));
    }
    for (; i + kLanes <= count; i += kLanes) acc[0] = _mm512_add_epi64(acc[0], _mm512_loadu_si512(words + i));
    for (size_t j = 1; j < kReadVectors; ++j) acc[0] = _mm512_add_epi64(acc[0], acc[j]);
    alignas(64) uint64_t lanes[kLanes];  // not _mm512_reduce_add_epi64: GCC 12's warns in its own header
    _mm512_store_si512(lanes, acc[0]);
    uint64_t total = 0;
    for (uint64_t lane : lanes) total += lane;
    for (; i < count; ++i) total += words[i];
    return total;
}

__attribute__((target("avx2"))) uint64_t sum_avx2(const uint64_t* words, size_t count) {
    constexpr size_t kLanes = 4;
    __m256i acc[kReadVectors];
    for (__m256i& a : acc) a = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + kReadVectors * kLanes <= count; i += kReadVectors * kLanes) {
        prefetch_ahead<kReadVectors * 32>(words + i);
#pragma GCC unroll 8
        for (size_t j = 0; j < kReadVectors; ++j)
            acc[j] = _mm256_add_epi64(
                acc[j], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + i + j * kLanes)));
    }
    for (; i + kLanes <= count; i += kLanes)
        acc[0] = _mm256_add_epi64(acc[0], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + i)));
    for (size_t j = 1; j < kReadVectors; ++j) acc[0] = _mm256_add_epi64(acc[0], acc[j]);
    alignas(32) uint64_t lanes[kLanes];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[0]);
    uint64_t total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < count; ++i) total += words[i];
    return total;
}

uint64_t sum_sse2(const uint64_t* words, size_t count) {
    constexpr size_t kLanes = 2;
    __m128i acc[kReadVectors];
    for (__m128i& a : acc) a = _mm_setzero_si128();
    size_t i = 0;
    for (; i + kReadVectors * kLanes <= count; i += kReadVectors * kLanes) {
        prefetch_ahead<kReadVectors * 16>(words + i);
#pragma GCC unroll 8
        for (size_t j = 0; j < kReadVectors; ++j)
            acc[j] = _mm_add_epi64(acc[j], _mm_loadu_si128(reinterpret_cast<const __m128i*>(words + i + j * kLanes)));
    }
    for (size_t j = 1; j < kReadVectors; ++j) acc[0] = _mm_add_epi64(acc[0], acc[j]);
    alignas(16) uint64_t lanes[kLanes];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), acc[0]);
    uint64_t total = lanes[0] + lanes[1];
    for (; i < count; ++i) total += words[i];
    return total;
}

// Dot-product loops. Each accumulator is a chain of one instruction per iteration; there are
// enough of them that latency x throughput (about 4 to 10 on current cores) never stalls the
// loop, and few enough that they, a and b stay in registers (32 zmm, 16 ymm). Every loop over
// the accumulators is unrolled, so each is a register of its own. Chains that start equal and do
// the same thing are one chain to the compiler: an empty asm makes each start value opaque.

// The sum of the accumulators' int32 lanes, widened.
template <typename Vector, int Chains>
[[gnu::always_inline]] inline int64_t lane_sum(const Vector (&acc)[Chains]) {
    int64_t total = 0;
#pragma GCC unroll 16
    for (int j = 0; j < Chains; ++j) {
        int32_t lanes[sizeof(Vector) / 4];
        __builtin_memcpy(lanes, &acc[j], sizeof lanes);
        for (int32_t lane : lanes) total += lane;
    }
    return total;
}

constexpr int kZmmChains = 16;
__attribute__((target("avx512vnni,avx512f"))) int64_t dot_avx512_vnni(int64_t iterations, uint32_t a, uint32_t b) {
    const __m512i va = _mm512_set1_epi32(int32_t(a)), vb = _mm512_set1_epi32(int32_t(b));
    __m512i acc[kZmmChains];
#pragma GCC unroll 16
    for (int j = 0; j < kZmmChains; ++j) {
        acc[j] = _mm512_setzero_si512();
        asm volatile("" : "+v"(acc[j]));
    }
    for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < kZmmChains; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], va, vb);
    return lane_sum(acc);
}

constexpr int kYmmChains = 12;
__attribute__((target("avxvnni,avx2"))) int64_t dot_avx_vnni(int64_t iterations, uint32_t a, uint32_t b) {
    const __m256i va = _mm256_set1_epi32(int32_t(a)), vb = _mm256_set1_epi32(int32_t(b));
    __m256i acc[kYmmChains];
#pragma GCC unroll 16
    for (int j = 0; j < kYmmChains; ++j) {
        acc[j] = _mm256_setzero_si256();
        asm volatile("" : "+x"(acc[j]));
    }
    for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < kYmmChains; ++j) acc[j] = _mm256_dpbusd_avx_epi32(acc[j], va, vb);
    return lane_sum(acc);
}

// Without VNNI the kernels' u8 x s8 step is three instructions: vpmaddubsw (pairs of products to
// int16), vpmaddwd by ones (to int32), vpaddd. Only the add is a chain, so fewer accumulators do.
// The products of invariant operands would be hoisted out of the loop and shared: the empty asm
// makes `va` look new before each one.
constexpr int kAvx2Chains = 8;
__attribute__((target("avx2"))) int64_t dot_avx2(int64_t iterations, uint32_t a, uint32_t b) {
    __m256i va = _mm256_set1_epi32(int32_t(a));
    const __m256i vb = _mm256_set1_epi32(int32_t(b)), ones = _mm256_set1_epi16(1);
    __m256i acc[kAvx2Chains];
#pragma GCC unroll 16
    for (int j = 0; j < kAvx2Chains; ++j) {
        acc[j] = _mm256_setzero_si256();
        asm volatile("" : "+x"(acc[j]));
    }
    for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < kAvx2Chains; ++j) {
            asm volatile("" : "+x"(va));
            acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(va, vb), ones));
        }
    return lane_sum(acc);
}

// Float multiply-adds, the attention's and the other ops' instruction: independent chains of
// a = a * b + c (one FMA: this file compiles with -ffp-contract=fast), enough to cover the FMA
// latency (4 cycles) on two ports. The result is the accumulators' sum as the int64 a DotLoop returns.
constexpr int kFmaChains = 12;
// The chains start from values the compiler cannot know (`seed`) and that differ, so it can neither
// fold a chain nor merge two.
template <typename Vector>
[[gnu::always_inline]] inline int64_t fma_chains(int64_t iterations, uint32_t seed) {
    const Vector b = qjit::splat<Vector>(0.5f), c = qjit::splat<Vector>(1.0f);
    Vector acc[kFmaChains];
#pragma GCC unroll 16
    for (int j = 0; j < kFmaChains; ++j) acc[j] = qjit::splat<Vector>(float(seed % 2) + float(j));
    for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < kFmaChains; ++j) acc[j] = acc[j] * b + c;
    float total = 0.0f;
    for (int j = 0; j < kFmaChains; ++j) total += qjit::sum_of_lanes(acc[j]);
    return int64_t(total);
}

__attribute__((target("avx512f,fma"))) int64_t fma_avx512(int64_t iterations, uint32_t a, uint32_t) {
    return fma_chains<qjit::Floats16>(iterations, a);
}
__attribute__((target("avx2,fma"))) int64_t fma_avx2(int64_t iterations, uint32_t a, uint32_t) {
    return fma_chains<qjit::Floats8>(iterations, a);
}
int64_t mul_add_sse2(int64_t iterations, uint32_t a, uint32_t) { return fma_chains<qjit::Floats4>(iterations, a); }

// AVX-VNNI (CPUID leaf 7, subleaf 1, EAX bit 4), which clang 14's __builtin_cpu_supports does not
// name; the OS's support of the registers is AVX2's.
bool has_avx_vnni() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1u);
}

}  // namespace

// Chosen on each call, not by an ifunc resolver (resolvers run before the sanitizers' runtimes are
// up); __builtin_cpu_supports also checks that the OS saves the wider registers.
std::vector<ReadLoop> supported_read_loops() {
    std::vector<ReadLoop> loops;
    if (__builtin_cpu_supports("avx512f")) loops.push_back({"avx512", sum_avx512});
    if (__builtin_cpu_supports("avx2")) loops.push_back({"avx2", sum_avx2});
    loops.push_back({"sse2", sum_sse2});
    return loops;
}

std::vector<DotLoop> supported_dot_loops() {
    std::vector<DotLoop> loops;
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512f"))
        loops.push_back({"vpdpbusd zmm (AVX512-VNNI)", kZmmChains * 64, dot_avx512_vnni});
    if (has_avx_vnni() && __builtin_cpu_supports("avx2"))
        loops.push_back({"vpdpbusd ymm (AVX-VNNI)", kYmmChains * 32, dot_avx_vnni});
    if (__builtin_cpu_supports("avx2"))
        loops.push_back({"vpmaddubsw+vpmaddwd+vpaddd ymm (AVX2)", kAvx2Chains * 32, dot_avx2});
    return loops;
}

std::vector<DotLoop> supported_fma_loops() {
    std::vector<DotLoop> loops;
    if (__builtin_cpu_supports("avx512f")) loops.push_back({"vfmadd231ps zmm (AVX-512)", kFmaChains * 16, fma_avx512});
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        loops.push_back({"vfmadd231ps ymm (FMA)", kFmaChains * 8, fma_avx2});
    loops.push_back({"mulps+addps xmm (SSE2)", kFmaChains * 4, mul_add_sse2});
    return loops;
}

}  // namespace qjit_tools
