// What a second stream costs a one-row product: the generated Q4_0 kernel (4-bit codes, groups of
// 32, fp16 scales) run panel by panel over 1 GiB of codes, far beyond the caches, with its scales
// read as the packed layout holds them today (a stream of their own, 1/8 of the codes' bytes) or
// kept in L1 (one panel's scales for every panel: what a layout that interleaves each group's
// scales with its codes can approach, as ggml's blocks do), at each software prefetch distance.
// The read probe runs in the same rounds; its best read is the floor. GB/s count what comes from memory: codes and scales,
// or codes alone where the scales stay in L1.
//
//   bench_metadata_stream [--isa=avx2|avx512|avx512_vnni] [--tu=5] [--prefetch=0,4,16] [--rounds=5]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/huge_page_arena.hpp"
#include "bench/bench_common.hpp"
#include "jit/x86/cpu_kernel.hpp"
#include "jit/x86/gemm_emitter.hpp"
#include "tuner/cpu_isa.hpp"

namespace {

constexpr int64_t kRows = 4096;  // K of a 4096-wide layer: 128 groups of 32
constexpr int64_t kGroups = kRows / 32;
constexpr size_t kCodeBytes = size_t(1) << 30;

struct Options {
    qjit_isa isa = QJIT_ISA_AVX2;
    int tu = 5;
    std::vector<int> prefetches{0, 4, 16};
    int rounds = 5;
};

std::vector<int> parse_ints(const std::string& text) {
    std::vector<int> values;
    for (size_t at = 0; at <= text.size();) {
        const size_t comma = text.find(',', at);
        values.push_back(std::atoi(text.substr(at, comma - at).c_str()));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return values;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&](const char* name) { return arg.substr(std::strlen(name)); };
        if (arg.rfind("--isa=", 0) == 0) {
            const std::string isa = value("--isa=");
            o.isa = isa == "avx512_vnni" ? QJIT_ISA_AVX512_VNNI : isa == "avx512" ? QJIT_ISA_AVX512 : QJIT_ISA_AVX2;
        } else if (arg.rfind("--tu=", 0) == 0) {
            o.tu = std::atoi(value("--tu=").c_str());
        } else if (arg.rfind("--prefetch=", 0) == 0) {
            o.prefetches = parse_ints(value("--prefetch="));
        } else if (arg.rfind("--rounds=", 0) == 0) {
            o.rounds = std::atoi(value("--rounds=").c_str());
        } else {
            std::fprintf(stderr, "usage: bench_metadata_stream [--isa=avx2|avx512|avx512_vnni] [--tu=5] "
                                 "[--prefetch=0,4,16] [--rounds=5]\n");
            std::exit(2);
        }
    }
    return o;
}

// Written page by page, so that no timing pays a page fault.
struct HugeBuffer {
    explicit HugeBuffer(size_t bytes) : bytes(bytes), data(static_cast<uint8_t*>(qjit::allocate_huge_pages(bytes))) {}
    ~HugeBuffer() { std::free(data); }
    size_t bytes;
    uint8_t* data;
};

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    const qjit_isa isa = qjit::best_isa_up_to(o.isa);
    qjit::jit::CpuKernelSpec spec;
    spec.format = qjit::f16_scaled_format();
    spec.format.k = kRows;
    spec.format.n = 4096;
    spec.format.bits = 4;
    spec.format.group_size = 32;
    spec.format.symmetric = true;
    spec.isa = qjit::jit::IsaFeatures::of(isa);
    spec.tiling.tu = o.tu;
    spec.tiling.mb = 1;

    const int64_t panel = spec.panel_columns();
    const size_t panel_code_bytes = size_t(kGroups * 16 * panel), panel_scale_bytes = size_t(kGroups * panel * 2);
    const size_t panels = kCodeBytes / panel_code_bytes;
    HugeBuffer codes(panels * panel_code_bytes), scales(panels * panel_scale_bytes);
    for (size_t i = 0; i < codes.bytes; ++i) codes.data[i] = uint8_t((i * 2654435761u) >> 13);
    for (size_t i = 0; i < scales.bytes; i += 2) std::memcpy(scales.data + i, "\x00\x3c", 2);  // fp16 1.0
    std::vector<int8_t> x(kRows);
    std::vector<float> steps(kGroups, 0.01f), sums(kGroups, 3.0f);
    std::vector<float> tile(static_cast<size_t>(panel));
    for (int64_t i = 0; i < kRows; ++i) x[size_t(i)] = int8_t(i % 101 - 50);
    qjit_tools::BandwidthProbe probe;

    struct Row {
        int prefetch;
        bool scales_in_l1;
        std::vector<double> gbps;      // read from memory
        std::vector<double> layer_us;  // per 4096 columns: a 4096 x 4096 layer
    };
    std::vector<Row> rows;
    std::vector<std::unique_ptr<qjit::jit::JitGenerator>> kernels;
    for (int prefetch : o.prefetches) {
        spec.tiling.prefetch = prefetch;
        kernels.push_back(qjit::jit::generate_cpu_kernel(spec));
        rows.push_back({prefetch, false, {}, {}});
        rows.push_back({prefetch, true, {}, {}});
    }
    std::vector<double> probe_gbps;
    for (int round = 0; round < o.rounds; ++round) {
        probe_gbps.push_back(probe.measure(1));
        for (size_t r = 0; r < rows.size(); ++r) {
            const auto fn = kernels[r / 2]->function<qjit::jit::CpuKernelFn>();
            const auto start = std::chrono::steady_clock::now();
            for (size_t p = 0; p < panels; ++p) {
                qjit::jit::CpuKernelArgs args{};
                args.codes = reinterpret_cast<const uint32_t*>(codes.data + p * panel_code_bytes);
                args.scales = scales.data + (rows[r].scales_in_l1 ? 0 : p * panel_scale_bytes);
                args.x = x.data();
                args.x_scale = steps.data();
                args.x_sum = sums.data();
                args.y = tile.data();
                args.full_groups = kGroups;
                fn(&args);
            }
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            const size_t read = panel_code_bytes + (rows[r].scales_in_l1 ? 0 : panel_scale_bytes);
            rows[r].gbps.push_back(double(panels * read) / seconds / 1e9);
            rows[r].layer_us.push_back(seconds / double(panels * panel) * 4096 * 1e6);
        }
    }
    // The floor: the best read, as the other benchmarks hold kernels against (noise only slows a read).
    const double floor = std::max(probe.peak(1), *std::max_element(probe_gbps.begin(), probe_gbps.end()));
    std::printf("%s, panels of %lld columns (tu=%d), 1 row, 1 thread, %d rounds (medians); read floor %.1f GB/s\n\n",
                qjit::jit::kernel_family_name(spec).c_str(), (long long)panel, o.tu, o.rounds, floor);
    std::printf("| prefetch | scales | µs per 4096 x 4096 layer | GB/s read from memory | of the read floor |\n"
                "|---|---|---|---|---|\n");
    for (Row& row : rows) {
        const double gbps = qjit_bench::median(row.gbps);
        std::printf("| %d | %s | %.0f | %.1f | %.2f |\n", row.prefetch, row.scales_in_l1 ? "in L1" : "own stream",
                    qjit_bench::median(row.layer_us), gbps, gbps / floor);
    }
    std::printf("(checksum %g)\n", double(tile[0]));
}
