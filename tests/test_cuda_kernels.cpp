// The CUDA backend on every machine, GPU or not: the generated source compiles with NVRTC for
// sm_80 and sm_90 in every variant, the device layout round-trips, tilings parse and print, and
// the C API reports a missing device cleanly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <set>
#include <tuple>
#include <string>

#include "cuda_variants.hpp"
#include "jit/cuda/cuda_source.hpp"
#include "runtime/cuda/nvrtc_compiler.hpp"
#include "runtime/cuda/cuda_driver.hpp"
#include "format/cuda_weights.hpp"
#include "base/error.hpp"
#include "test_support.hpp"
#include "tuner/cuda_search.hpp"
#include "tuner/tuning_problem.hpp"

namespace qjit {
namespace {

using jit::cuda::ActivationType;
using jit::cuda::CudaKernelSpec;
using jit::cuda::CudaTiling;
using jit::cuda::KernelKind;

void require_nvrtc() {
    std::string why;
    if (cuda::nvrtc_available(&why)) return;
#ifdef QJIT_EXPECT_NVRTC
    FAIL() << "the CUDA toolkit was found at configure time but NVRTC does not load: " << why;
#else
    GTEST_SKIP() << "no NVRTC here: " << why;
#endif
}

bool is_elf(const std::vector<char>& cubin) { return cubin.size() > 4 && std::string(cubin.data(), 4) == "\x7f" "ELF"; }

// Compiles each variant with NVRTC for `arch` and checks the cubin and its entry point.
void expect_compiles(const std::vector<CudaKernelSpec>& variants, int arch) {
    for (const CudaKernelSpec& spec : variants) {
        const jit::cuda::GeneratedKernel kernel = jit::cuda::generate_kernel(spec);
        try {
            const cuda::CompiledKernel out = cuda::compile_cuda(kernel.source, kernel.name, arch);
            EXPECT_TRUE(is_elf(out.cubin)) << kernel.name;
            EXPECT_NE(out.ptx.find(".entry " + kernel.entry), std::string::npos) << kernel.name;
        } catch (const Error& e) {
            ADD_FAILURE() << kernel.name << ": " << e.what();
        }
    }
}

// Every variant of every format of one bit width that fits sm_<arch> (every_cuda_format's and
// every_super_block_cuda_format's formats of that width).
std::vector<CudaKernelSpec> every_variant(int bits, int arch, int* skipped) {
    std::vector<test::CudaFormat> formats = test::every_cuda_format();
    for (const test::CudaFormat& format : test::every_super_block_cuda_format()) formats.push_back(format);
    std::vector<CudaKernelSpec> variants;
    for (const test::CudaFormat& format : formats)
        if (format.bits == bits)
            for (const CudaKernelSpec& spec : test::cuda_variants(format, 4096, arch, skipped)) variants.push_back(spec);
    return variants;
}

class CudaCompile : public ::testing::TestWithParam<std::tuple<int, int>> {};
class CudaCompileSweep : public CudaCompile {};

// A fixed sample of one bit width's variants for one architecture: each kernel kind with each
// activation type, scale type, symmetry and grouping (test::sample_of).
TEST_P(CudaCompile, SampleCompiles) {
    require_nvrtc();
    if (testing::Test::IsSkipped() || testing::Test::HasFailure()) return;
    const auto [bits, arch] = GetParam();
    int skipped = 0;
    const std::vector<CudaKernelSpec> sample = test::sample_of(every_variant(bits, arch, &skipped));
    std::set<std::tuple<KernelKind, jit::cuda::ActivationType, bool>> covered;
    for (const CudaKernelSpec& spec : sample) covered.insert({spec.tiling.kind, spec.activations, spec.format.f16_scales()});
    EXPECT_EQ(covered.size(), 12u) << "the sample must hold the three kinds x both activation types x both scale types";
    expect_compiles(sample, arch);
    std::printf("%d-bit sm_%d: %zu sampled variants compiled\n", bits, arch, sample.size());
}

// Every variant (minutes on 2 cores): ctest -L cuda_sweep, or QJIT_CUDA_COMPILE_SWEEP=1.
TEST_P(CudaCompileSweep, EveryVariantCompiles) {
    const char* sweep = std::getenv("QJIT_CUDA_COMPILE_SWEEP");
    if (!sweep || std::string(sweep) != "1") GTEST_SKIP() << "the full sweep runs with QJIT_CUDA_COMPILE_SWEEP=1 (ctest -L cuda_sweep)";
    require_nvrtc();
    if (testing::Test::IsSkipped() || testing::Test::HasFailure()) return;
    const auto [bits, arch] = GetParam();
    int skipped = 0;
    const std::vector<CudaKernelSpec> variants = every_variant(bits, arch, &skipped);
    EXPECT_GT(variants.size(), 40u);
    expect_compiles(variants, arch);
    std::printf("%d-bit sm_%d: %zu variants compiled, %d skipped (shared memory above the sm_%d limit)\n", bits, arch,
                variants.size(), skipped, arch);
}

std::string bits_and_arch_name(const testing::TestParamInfo<std::tuple<int, int>>& info) {
    return "q" + std::to_string(std::get<0>(info.param)) + "_sm" + std::to_string(std::get<1>(info.param));
}
// Every width for sm_90, and 4 bits for sm_80, whose sources differ only in the variants that fit
// its shared memory; the sweep compiles every width for both.
INSTANTIATE_TEST_SUITE_P(BitsAndArch, CudaCompile,
                         ::testing::Values(std::tuple{2, 90}, std::tuple{3, 90}, std::tuple{4, 90}, std::tuple{5, 90},
                                           std::tuple{6, 90}, std::tuple{8, 90}, std::tuple{4, 80}),
                         bits_and_arch_name);
INSTANTIATE_TEST_SUITE_P(BitsAndArch, CudaCompileSweep,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 6, 8), ::testing::Values(80, 90)),
                         bits_and_arch_name);

TEST(CudaCompile, SupportKernelsCompile) {
    require_nvrtc();
    if (testing::Test::IsSkipped() || testing::Test::HasFailure()) return;
    for (int arch : {80, 90}) {
        const auto out = cuda::compile_cuda(jit::cuda::support_kernels_source(), "qjit_support", arch);
        EXPECT_TRUE(is_elf(out.cubin));
        for (const char* entry : {"qjit_gather_rows", "qjit_cast_f32_to_f16", "qjit_cast_f32_to_bf16"})
            EXPECT_NE(out.ptx.find(std::string(".entry ") + entry), std::string::npos) << entry;
        for (const char* pass : {"qjit_scale_columns", "qjit_add_into", "qjit_low_rank_xu", "qjit_low_rank_tv",
                                  "qjit_swiglu", "qjit_gelu"})
            for (const char* type : {"_f16", "_bf16"})
                EXPECT_NE(out.ptx.find(std::string(".entry ") + pass + type), std::string::npos) << pass << type;
    }
}

// The mixed-format GEMV for each combination of its parts, both activation types, sm_80 and sm_90.
TEST(CudaCompile, MixedGemvCompiles) {
    require_nvrtc();
    if (testing::Test::IsSkipped() || testing::Test::HasFailure()) return;
    struct Parts { bool mixed, second_order, outliers, symmetric; };
    const Parts combinations[] = {{true, true, true, false}, {true, false, false, false},
                                  {false, true, false, false}, {false, false, true, true}};
    int index = 0;
    for (const Parts& parts : combinations)
        for (int arch : {80, 90}) {
            CudaKernelSpec spec = test::cuda_spec({parts.mixed ? 4 : 3, 64, parts.symmetric}, 4096, arch);
            if (parts.mixed)
                for (int g = 0; g < 64; ++g) spec.format.group_bits.push_back(uint8_t(g % 3 ? 2 : 4));
            if (parts.second_order) spec.format.scale_type = ScaleType::SecondOrder;
            if (parts.outliers) spec.format.outliers = 100;
            spec.rows = 1 << (index % 4);
            spec.activations = index++ % 2 ? ActivationType::BF16 : ActivationType::F16;
            const jit::cuda::GeneratedKernel kernel = jit::cuda::generate_kernel(spec);
            EXPECT_EQ(kernel.entry, "qjit_mixed_gemv");
            const auto out = cuda::compile_cuda(kernel.source, kernel.name, arch);
            EXPECT_TRUE(is_elf(out.cubin)) << kernel.name;
            EXPECT_NE(out.ptx.find(".entry qjit_mixed_gemv"), std::string::npos) << kernel.name;
        }
}

// The tuner's search space of a mixed format: the GEMV at one column per warp, one per warp count.
TEST(CudaTiling, MixedFormatsEnumerateTheirGemvOnly) {
    CudaKernelSpec spec = test::cuda_spec({3, 64, false}, 4096, 90);
    spec.format.outliers = 100;
    spec.rows = 8;
    const std::vector<CudaTiling> tilings = enumerate_cuda_tilings(spec);
    ASSERT_EQ(tilings.size(), 3u);
    for (const CudaTiling& t : tilings) {
        EXPECT_EQ(t.kind, KernelKind::Gemv);
        EXPECT_EQ(t.columns_per_warp, 1);
    }
}

TEST(CudaCompile, SplitKSharesOneSource) {
    CudaKernelSpec spec = test::cuda_spec({4, 128, false}, 4096, 90);
    spec.rows = 64;
    spec.tiling.kind = KernelKind::Gemm;
    const std::string one = jit::cuda::generate_kernel(spec).source;
    spec.tiling.split_k = 4;
    EXPECT_EQ(jit::cuda::generate_kernel(spec).source, one);
    spec.tiling.stages = 4;
    EXPECT_NE(jit::cuda::generate_kernel(spec).source, one);
}

TEST(CudaTiling, TextRoundTripsForEveryEnumeratedTiling) {
    for (int rows : {1, 8, 16, 64}) {
        CudaKernelSpec spec = test::cuda_spec({4, 128, false}, 4096, 90);
        spec.rows = rows;
        const std::vector<CudaTiling> tilings = enumerate_cuda_tilings(spec);
        ASSERT_FALSE(tilings.empty());
        for (const CudaTiling& t : tilings) {
            EXPECT_EQ(jit::cuda::parse_tiling(jit::cuda::tiling_text(t)), t) << jit::cuda::tiling_text(t);
            EXPECT_TRUE(jit::cuda::kind_serves(t.kind, rows)) << jit::cuda::tiling_text(t) << " rows=" << rows;
        }
    }
}

TEST(CudaTiling, BadKnobsAreNamed) {
    EXPECT_THROW(jit::cuda::parse_tiling("bm=abc"), Error);
    EXPECT_THROW(jit::cuda::parse_tiling("colour=3"), Error);
    EXPECT_THROW(jit::cuda::parse_tiling("kernel=conv"), Error);
    CudaKernelSpec spec = test::cuda_spec({3, 128, false}, 4096, 90);
    spec.rows = 64;
    spec.tiling = jit::cuda::parse_tiling("kernel=gemm,bk=64");
    try {
        jit::cuda::check_spec(spec);
        FAIL() << "3-bit with bk=64 was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("bk 64"), std::string::npos) << e.what();
    }
    spec = test::cuda_spec({4, 16, false}, 4096, 90);
    EXPECT_FALSE(jit::cuda::is_valid(spec));  // groups of 16 rows have no CUDA kernel
    spec = test::cuda_spec({4, 128, false}, 4096, 75);
    EXPECT_FALSE(jit::cuda::is_valid(spec));
}

// Every kernel kind takes the device layout's widths; a width without one is refused by name, and
// a GEMM K step that leaves 5-bit codes short of whole 16-byte chunks by its knob.
TEST(CudaTiling, KernelsTakeTheDeviceWidths) {
    for (int bits = 1; bits <= 8; ++bits) {
        const bool taken = bits != 1 && bits != 7;
        CudaKernelSpec spec = test::cuda_spec({bits, 128, false}, 4096, 90);
        EXPECT_EQ(jit::cuda::unsupported_reason(spec.format),
                  taken ? "" : concat("CUDA kernels take 2, 3, 4, 5, 6 or 8 bits, not ", bits));
        for (const char* tiling : {"kernel=gemv", "kernel=mma", "kernel=gemm,bm=64,bn=128,bk=128,warps=8"}) {
            spec.tiling = jit::cuda::parse_tiling(tiling);
            spec.rows = spec.tiling.kind == KernelKind::Gemm ? 64 : 8;
            EXPECT_EQ(jit::cuda::is_valid(spec), taken) << bits << "-bit " << tiling;
        }
    }
    CudaKernelSpec spec = test::cuda_spec({5, 128, false}, 4096, 90);
    spec.rows = 64;
    spec.tiling = jit::cuda::parse_tiling("kernel=gemm,bk=64");
    EXPECT_FALSE(jit::cuda::is_valid(spec));
    spec.format.bits = 6;
    EXPECT_TRUE(jit::cuda::is_valid(spec));
}

// Float offsets run in every uniform-width kernel kind, the GEMM staging them at the scales' type;
// beside outliers (the mixed GEMV's part) they are refused by name.
TEST(CudaTiling, FloatOffsetsRunInEveryKindButNotBesideOutliers) {
    CudaKernelSpec spec = test::cuda_spec({4, 32, false, true}, 4096, 90);
    EXPECT_EQ(jit::cuda::unsupported_reason(spec.format), "");
    for (const char* tiling : {"kernel=gemv", "kernel=mma", "kernel=gemm,bm=64,bn=128,bk=128,warps=8"}) {
        spec.tiling = jit::cuda::parse_tiling(tiling);
        spec.rows = spec.tiling.kind == KernelKind::Gemm ? 64 : 8;
        EXPECT_TRUE(jit::cuda::is_valid(spec)) << tiling;
    }
    CudaKernelSpec zero_points = spec, f32 = spec;
    zero_points.format.float_offsets = false;
    f32.format.scale_type = ScaleType::F32;
    EXPECT_EQ(jit::cuda::shared_memory_bytes(spec), jit::cuda::shared_memory_bytes(zero_points));  // fp16 as u16
    // fp32 scales and offsets: 2 + 2 more bytes for each of 4 groups x 128 columns, in each of 3 stages.
    EXPECT_EQ(jit::cuda::shared_memory_bytes(f32) - jit::cuda::shared_memory_bytes(spec), 3 * 4 * 128 * 4);
    spec.format.outliers = 10;
    EXPECT_EQ(jit::cuda::unsupported_reason(spec.format),
              "the CUDA kernel of mixed widths, second-order scales and outliers reads integer zero points, not float "
              "offsets");
}

// Super-block scales with groups of 32 run in every uniform-width kernel kind, the GEMM staging a
// tile's d (and dmin) and byte codes; groups of 16 and super-block scales beside outliers are
// refused by name.
TEST(CudaTiling, SuperBlockScalesRunInEveryKindWithGroupsOf32) {
    for (const test::CudaFormat& format : test::every_super_block_cuda_format()) {
        CudaKernelSpec spec = test::cuda_spec(format, 4096, 90);
        EXPECT_EQ(jit::cuda::unsupported_reason(spec.format), "") << spec.format.name();
        for (const char* tiling : {"kernel=gemv", "kernel=mma", "kernel=gemm,bm=64,bn=128,bk=256,warps=8"}) {
            spec.tiling = jit::cuda::parse_tiling(tiling);
            spec.rows = spec.tiling.kind == KernelKind::Gemm ? 64 : 8;
            EXPECT_TRUE(jit::cuda::is_valid(spec)) << spec.format.name() << " " << tiling;
        }
    }
    CudaKernelSpec q4_k = test::cuda_spec({4, 32, false, true, 6}, 4096, 90);
    q4_k.tiling = jit::cuda::parse_tiling("kernel=gemm,bm=64,bn=128,bk=128,warps=8,stages=3");
    CudaKernelSpec q4_1 = q4_k;
    q4_1.format.scale_type = ScaleType::F16, q4_1.format.scale_code_bits = 0;
    // Per stage: 128 columns of d and dmin (2 bytes each) and 4 groups of byte codes for each, in
    // place of 4 groups of fp16 scales and offsets.
    EXPECT_EQ(jit::cuda::shared_memory_bytes(q4_k) - jit::cuda::shared_memory_bytes(q4_1),
              3 * (2 * (128 * 2 + 4 * 128) - 4 * 128 * 4));
    CudaKernelSpec q6_k = test::cuda_spec({6, 16, true, false, 8}, 4096, 90);
    EXPECT_EQ(jit::cuda::unsupported_reason(q6_k.format),
              "CUDA kernels need groups of a multiple of 32 rows (or one per column), not 16");
    q4_k.format.outliers = 10;
    EXPECT_EQ(jit::cuda::unsupported_reason(q4_k.format),
              "the CUDA kernel of mixed widths, second-order scales and outliers reads integer zero points, not float "
              "offsets");
    CudaKernelSpec symmetric = test::cuda_spec({4, 32, true, false, 8}, 4096, 90);
    symmetric.format.outliers = 10;
    EXPECT_EQ(jit::cuda::unsupported_reason(symmetric.format),
              "the CUDA kernel of mixed widths, second-order scales and outliers does not read super-block scales");
}

TEST(CudaTiling, SharedMemoryDecidesWhatADeviceRuns) {
    CudaKernelSpec spec = test::cuda_spec({8, 128, false}, 4096, 80);
    spec.rows = 64;
    spec.tiling = jit::cuda::parse_tiling("kernel=gemm,bm=64,bn=256,bk=128,warps=8,stages=5");
    ASSERT_TRUE(jit::cuda::is_valid(spec));
    EXPECT_GT(jit::cuda::shared_memory_bytes(spec), jit::cuda::published_shared_memory_optin(90));
    EXPECT_FALSE(jit::cuda::fits_device(spec, jit::cuda::published_shared_memory_optin(90)));
    GpuProperties small;
    small.sm_count = 100, small.shared_memory_per_block_optin = 99 * 1024, small.compute_major = 8;
    for (const CudaTiling& t : ranked_cuda_tilings(spec, 4096, small)) {
        spec.tiling = t;
        EXPECT_LE(jit::cuda::shared_memory_bytes(spec), 99 * 1024) << jit::cuda::tiling_text(t);
    }
}

TEST(CudaTuner, KeysAndBuckets) {
    CudaKernelSpec spec = test::cuda_spec({4, 128, false}, 4096, 90);
    spec.rows = 16;
    EXPECT_EQ(cuda_kernel_key(spec, 11008), "q4g128_asym_cuda_f16_sm90 K=4096 N=11008 m=16");
    spec.tiling.kind = KernelKind::Gemm;
    EXPECT_EQ(cuda_kernel_key(spec, 11008), "q4g128_asym_cuda_f16_sm90 K=4096 N=11008 m=16");
    EXPECT_EQ(batch_bucket(1), 1);
    EXPECT_EQ(batch_bucket(3), 4);
    EXPECT_EQ(batch_bucket(9), 16);
    EXPECT_EQ(batch_bucket(500), 64);
    EXPECT_EQ(cuda_batch_bucket(64), 64);  // the GPU's buckets go on: its tiles change past 64 rows
    EXPECT_EQ(cuda_batch_bucket(65), 128);
    EXPECT_EQ(cuda_batch_bucket(300), 512);
    EXPECT_EQ(cuda_batch_bucket(5000), 512);
}

// The tuner screens one tiling per structure first: pipeline depth, split-K and loads in flight
// are variants of a structure; kernel kind, tile and columns per warp are not.
TEST(CudaTuner, StructuresGroupVariantsOfOneTile) {
    CudaKernelSpec spec = test::cuda_spec({4, 128, false}, 4096, 90);
    spec.rows = 64;
    spec.tiling.kind = KernelKind::Gemm;
    CudaTiling deeper = spec.tiling, split = spec.tiling, wider = spec.tiling;
    deeper.stages += 1;
    split.split_k = 4;
    wider.block_n *= 2;
    EXPECT_EQ(cuda_tiling_structure(deeper), cuda_tiling_structure(spec.tiling));
    EXPECT_EQ(cuda_tiling_structure(split), cuda_tiling_structure(spec.tiling));
    EXPECT_NE(cuda_tiling_structure(wider), cuda_tiling_structure(spec.tiling));
    CudaTiling gemv, more_in_flight, more_columns;
    more_in_flight.chunks_in_flight = 4;
    more_columns.columns_per_warp = 2;
    EXPECT_EQ(cuda_tiling_structure(more_in_flight), cuda_tiling_structure(gemv));
    EXPECT_NE(cuda_tiling_structure(more_columns), cuda_tiling_structure(gemv));
    EXPECT_NE(cuda_tiling_structure(gemv), cuda_tiling_structure(spec.tiling));
}

// The ranking the search screens in: the mma kernel first wherever it serves (measured on an H100),
// the GEMM above 64 rows; every candidate valid for the bucket.
// At one row and 4 or 8 bits the GEMV ranks first, two columns per warp (measured on an H100 and an
// H200); narrower codes and more rows keep the mma kernel first.
TEST(CudaTuner, GemvRanksFirstForOneRowOfWideCodes) {
    GpuProperties h200;
    h200.name = "H200-like", h200.compute_major = 9, h200.sm_count = 132;
    h200.shared_memory_per_block_optin = 227 * 1024;
    for (int bits : {2, 3, 4, 8})
        for (int64_t rows : {1, 2}) {
            CudaKernelSpec spec = test::cuda_spec({bits, 128, false}, 8192, 90);
            spec.rows = int(rows);
            const std::vector<CudaTiling> ranked = ranked_cuda_tilings(spec, 8192, h200);
            ASSERT_FALSE(ranked.empty());
            const bool gemv = rows == 1 && bits >= 4;
            EXPECT_EQ(ranked.front().kind, gemv ? KernelKind::Gemv : KernelKind::Mma)
                << bits << " bits, " << rows << " rows";
            if (gemv) EXPECT_EQ(ranked.front().columns_per_warp, 2) << jit::cuda::tiling_text(ranked.front());
        }
}

TEST(CudaTuner, MmaKernelRanksFirstUpTo64Rows) {
    GpuProperties h100;
    h100.name = "H100-like", h100.compute_major = 9, h100.sm_count = 132;
    h100.shared_memory_per_block_optin = 227 * 1024;
    for (int64_t rows : {1, 2, 8, 16, 64, 128}) {
        CudaKernelSpec spec = test::cuda_spec({3, 128, false}, 4096, 90);
        spec.rows = int(rows);
        const std::vector<CudaTiling> ranked = ranked_cuda_tilings(spec, 11008, h100);
        ASSERT_FALSE(ranked.empty());
        EXPECT_EQ(ranked.front().kind, rows <= 64 ? KernelKind::Mma : KernelKind::Gemm) << "rows " << rows;
        for (const CudaTiling& t : ranked) EXPECT_TRUE(jit::cuda::kind_serves(t.kind, rows)) << jit::cuda::tiling_text(t);
    }
}

// Past 64 rows only the GEMM serves; at 512 rows the model ranks first a tile of 128 rows or more
// (each weight decoded at most four times), with 64-row tiles close behind it at 256 rows, where
// they fill the SMs better (timing decides between them).
TEST(CudaTuner, PrefillRanksTallTilesFirst) {
    GpuProperties h200;
    h200.name = "H200-like", h200.compute_major = 9, h200.sm_count = 132;
    h200.shared_memory_per_sm = 228 * 1024, h200.shared_memory_per_block_optin = 227 * 1024;
    for (auto [k, n] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 11008}, {8192, 28672}})
        for (int rows : {128, 512}) {
            CudaKernelSpec spec = test::cuda_spec({4, 128, false}, k, 90);
            spec.rows = rows;
            const std::vector<CudaTiling> ranked = ranked_cuda_tilings(spec, n, h200);
            ASSERT_FALSE(ranked.empty());
            for (const CudaTiling& t : ranked) ASSERT_EQ(t.kind, KernelKind::Gemm) << jit::cuda::tiling_text(t);
            if (rows == 512)
                EXPECT_GE(ranked.front().block_m, 128) << k << "x" << n << " m=" << rows << ": "
                                                   << jit::cuda::tiling_text(ranked.front());
        }
}

// The device layout: every code reads back from where cuda_code_layout.hpp puts it, padding is zero.
TEST(CudaWeights, CodesRoundTripForEveryWidth) {
    std::mt19937 rng(7);
    for (int bits : {2, 3, 4, 5, 6, 8})
        for (auto [k, n] : {std::pair<int64_t, int64_t>{37, 5}, {256, 3}, {300, 260}}) {
            QuantizedMatrix m;
            QuantParams& p = m.params;
            p.k = k, p.n = n, p.bits = bits, p.group_size = 32, p.symmetric = false;
            p.scales.assign(size_t(p.num_groups() * n), 0.5f);
            p.zeros.assign(size_t(p.num_groups() * n), uint16_t(1));
            m.codes.resize(size_t(k * n));
            for (uint8_t& c : m.codes) c = uint8_t(rng() % (1u << bits));
            const CudaWeights w = pack_cuda_weights(m);
            const std::vector<uint32_t> fragments = pack_fragment_codes(m);
            EXPECT_EQ(w.kp % 256, 0);
            EXPECT_EQ(w.np % 256, 0);
            EXPECT_EQ(fragments.size(), w.codes.size());  // the same words, in another order
            for (int64_t r = 0; r < w.kp; ++r)
                for (int64_t c = 0; c < w.np; ++c) {
                    const int expected = r < k && c < n ? m.codes[size_t(r * n + c)] : 0;
                    ASSERT_EQ(unpack_cuda_code(w, r, c), expected) << bits << "-bit row " << r << " column " << c;
                    ASSERT_EQ(unpack_fragment_code(fragments, bits, w.kp, r, c), expected)
                        << bits << "-bit fragment order, row " << r << " column " << c;
                }
            EXPECT_TRUE(w.f16_scales);  // 0.5 is exact in fp16
            EXPECT_EQ(w.zeros[size_t(w.np + n - 1)], 1);
            EXPECT_EQ(w.zeros[size_t(w.np + n)], 0);  // a padding column
        }
}

// A block of the largest codes sets every bit of its `bits` words: no width wastes a bit (with the
// round trip above, no two codes share one).
TEST(CudaWeights, BlocksUseEveryBit) {
    for (int bits : {2, 3, 4, 5, 6, 8}) {
        QuantizedMatrix m;
        m.params.k = 32, m.params.n = 1, m.params.bits = bits, m.params.group_size = 32, m.params.symmetric = true;
        m.params.scales = {1.f};
        m.codes.assign(32, uint8_t((1u << bits) - 1));
        const CudaWeights w = pack_cuda_weights(m);
        for (int word = 0; word < bits; ++word)
            EXPECT_EQ(w.codes[size_t(word)], 0xffffffffu) << bits << "-bit word " << word;
    }
}

TEST(CudaWeights, Fp32ScalesStayFp32UnlessExactInFp16) {
    QuantizedMatrix m;
    m.params.k = 32, m.params.n = 1, m.params.bits = 4, m.params.group_size = 32, m.params.symmetric = true;
    m.params.scales = {0.1f};
    m.codes.assign(32, 3);
    EXPECT_FALSE(pack_cuda_weights(m).f16_scales);
    m.params.scale_type = ScaleType::F16;
    EXPECT_TRUE(pack_cuda_weights(m).f16_scales);
}

// Without a GPU every CUDA entry point says so; with one, a CUDA context works (device tests).
TEST(CudaCApi, NoDeviceIsReportedCleanly) {
    int count = -1;
    const qjit_status status = qjit_cuda_device_count(&count);
    if (status == QJIT_OK) GTEST_SKIP() << "this machine has a CUDA device; see the CudaDevice tests";
    EXPECT_EQ(status, QJIT_ERROR_NO_DEVICE) << qjit_last_error();
    EXPECT_EQ(count, 0);
    EXPECT_NE(std::string(qjit_last_error()).find("no CUDA device"), std::string::npos) << qjit_last_error();
    qjit_cuda_device_info info;
    EXPECT_STATUS(qjit_cuda_get_device_info(0, &info), QJIT_ERROR_NO_DEVICE, "no CUDA device");

    qjit_context_options options;
    qjit_context_options_init(&options);
    EXPECT_EQ(options.cuda_device, -1);
    options.cuda_device = 0;
    qjit_context* context = nullptr;
    EXPECT_STATUS(qjit_context_create(&options, &context), QJIT_ERROR_NO_DEVICE, "no CUDA device");
    EXPECT_EQ(context, nullptr);
}

TEST(CudaCApi, CpuLayersRefuseCudaCalls) {
    test::ContextPtr context = test::make_test_context();
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    const std::vector<float> w = test::random_floats(64 * 8, 1);
    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_create_from_f32(context.get(), &config, 64, 8, w.data(), QJIT_LAYOUT_K_BY_N, &raw), QJIT_OK)
        << qjit_last_error();
    test::LinearPtr layer(raw);
    int dummy = 0;
    EXPECT_STATUS(qjit_linear_forward_cuda(layer.get(), &dummy, &dummy, 1, QJIT_DTYPE_F16, nullptr),
                  QJIT_ERROR_NO_DEVICE, "cuda_device");
    double us = 0;
    EXPECT_STATUS(qjit_linear_benchmark_cuda(layer.get(), 1, QJIT_DTYPE_F16, 1, &us), QJIT_ERROR_NO_DEVICE,
                  "cuda_device");
    qjit_linear_tuning tuning;
    EXPECT_STATUS(qjit_linear_get_tuning_cuda(layer.get(), 1, QJIT_DTYPE_F16, &tuning), QJIT_ERROR_NO_DEVICE,
                  "cuda_device");
    EXPECT_STATUS(qjit_linear_forward_cuda(nullptr, &dummy, &dummy, 1, QJIT_DTYPE_F16, nullptr),
                  QJIT_ERROR_INVALID_ARGUMENT, "layer");
}

TEST(CudaCApi, BadCudaOptionsAreNamed) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.cuda_dtype = QJIT_DTYPE_F32;
    qjit_context* context = nullptr;
    EXPECT_STATUS(qjit_context_create(&options, &context), QJIT_ERROR_INVALID_ARGUMENT, "cuda_dtype");
    options.cuda_dtype = QJIT_DTYPE_F16;
    options.cuda_device = -2;
    EXPECT_STATUS(qjit_context_create(&options, &context), QJIT_ERROR_INVALID_ARGUMENT, "cuda_device");
}

}  // namespace
}  // namespace qjit
