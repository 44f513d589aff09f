#include "runtime/flash/sparse_product_jit.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "base/error.hpp"
#include "base/half.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {

namespace {

constexpr int kMaxRows = 4;
constexpr int64_t kTimingBytes = int64_t(8) << 20;  // past the caches: products stream their vectors
constexpr int64_t kTimingSlots = 512;
constexpr int kTimingRepeats = 5;

jit::SparseProductSpec spec_of(const NeuronCache::Data& d, jit::IsaFeatures isa) {
    jit::SparseProductSpec spec;
    spec.format = d.header.vector.format;
    spec.format.k = d.d_model;
    spec.format.n = 1;
    spec.vector_bytes = d.vector_bytes;
    spec.isa = isa;
    return spec;
}

// The tiling with at most as many vectors a pass as `rows` rows leave registers for.
jit::SparseProductTiling fitted(jit::SparseProductSpec spec, int rows, jit::SparseProductTiling tiling) {
    spec.rows = rows;
    spec.tiling = tiling;
    while (spec.tiling.vectors > 1 && jit::vector_registers_needed(spec) > 16) --spec.tiling.vectors;
    return spec.tiling;
}

// Vectors of the spec's format with valid metadata (scales near 1/16, any codes and zero points).
std::vector<uint8_t> synthetic_vectors(const jit::SparseProductSpec& spec, int64_t count) {
    std::vector<uint8_t> bytes(size_t(count * spec.vector_bytes + jit::kSparseVectorPadding));
    std::mt19937 random(7);
    for (uint8_t& b : bytes) b = uint8_t(random());
    const int scale_bytes = spec.format.scale_bytes();
    const int64_t metadata = spec.groups() * (spec.format.float_offsets ? 2 : 1);
    for (int64_t v = 0; v < count; ++v) {
        uint8_t* at = bytes.data() + v * spec.vector_bytes + spec.scales_offset();
        for (int64_t g = 0; g < metadata; ++g, at += scale_bytes) {
            if (scale_bytes == 2) {
                const uint16_t h = float_to_half(0.0625f);
                std::memcpy(at, &h, 2);
            } else {
                const float f = 0.0625f;
                std::memcpy(at, &f, 4);
            }
        }
    }
    return bytes;
}

// Registry of the tuned kernels, one per vector format and ISA.
struct Registry {
    std::mutex mutex;
    std::map<std::string, std::unique_ptr<SparseProductJit>> kernels;
};

}  // namespace

SparseProductJit::SparseProductJit(const NeuronCache::Data& d, jit::IsaFeatures isa, jit::SparseProductTiling tiling)
    : spec_(spec_of(d, isa)) {
    for (int rows = 1; rows <= kMaxRows; ++rows) generate(rows, fitted(spec_, rows, tiling));
}

SparseProductJit::SparseProductJit(const NeuronCache::Data& d, jit::IsaFeatures isa, Tuned) : spec_(spec_of(d, isa)) {
    const int64_t vectors = std::clamp<int64_t>(kTimingBytes / spec_.vector_bytes, 64, 1 << 16);
    const std::vector<uint8_t> buffer = synthetic_vectors(spec_, vectors);
    std::mt19937 random(11);
    std::vector<int32_t> slots(size_t(std::min(vectors, kTimingSlots)));
    for (int32_t& s : slots) s = int32_t(random() % uint32_t(vectors));
    std::vector<float> x(size_t(kMaxRows * spec_.format.k));
    for (float& v : x) v = float(int(random() % 255) - 127) / 64.0f;
    SparseActivations prepared;
    std::vector<float> out(slots.size() * kMaxRows);

    for (int rows = 1; rows <= kMaxRows; ++rows) {
        double best_seconds = INFINITY;
        jit::SparseProductTiling best{};
        for (int v = 1; v <= 4; ++v)
            for (int prefetch = 0; prefetch <= 1; ++prefetch) {
                const jit::SparseProductTiling tiling{v, prefetch};
                if (fitted(spec_, rows, tiling) != tiling) continue;  // needs more registers
                generate(rows, tiling);
                prepare(x.data(), rows, prepared);
                std::vector<double> seconds;
                for (int rep = 0; rep <= kTimingRepeats; ++rep) {
                    const auto start = std::chrono::steady_clock::now();
                    products(buffer.data(), slots.data(), int64_t(slots.size()), prepared, rows, out.data());
                    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
                    if (rep > 0) seconds.push_back(took.count());  // the first warms the code
                }
                std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
                if (seconds[seconds.size() / 2] < best_seconds) {
                    best_seconds = seconds[seconds.size() / 2];
                    best = tiling;
                }
            }
        generate(rows, best);
    }
}

SparseProductJit::~SparseProductJit() = default;

const SparseProductJit* SparseProductJit::for_cache(const NeuronCache::Data& d) {
    if (!d.quantized) return nullptr;
    const qjit_isa level = best_isa_up_to(QJIT_ISA_AVX512_VNNI);
    const jit::IsaFeatures isa = jit::IsaFeatures::of(level);
    jit::SparseProductSpec spec = spec_of(d, isa);
    if (!isa.avx2 || !jit::sparse_product_unsupported_reason(spec.format).empty()) return nullptr;
    try {
        jit::check_spec(spec);
    } catch (const Error&) {
        return nullptr;  // a geometry the kernels refuse (it reads too far past a vector): the hand-written path
    }
    static Registry registry;
    const std::string key = concat(jit::kernel_name(spec), "_k", spec.format.k);
    std::lock_guard lock(registry.mutex);
    auto& entry = registry.kernels[key];
    if (!entry) entry.reset(new SparseProductJit(d, isa, Tuned{}));
    return entry.get();
}

void SparseProductJit::generate(int rows, jit::SparseProductTiling tiling) {
    jit::SparseProductSpec spec = spec_;
    spec.rows = rows;
    spec.tiling = tiling;
    kernels_[rows - 1] = jit::generate_sparse_product_kernel(spec);
}

void SparseProductJit::prepare(const float* x, int64_t m, SparseActivations& out) const {
    const int64_t d_model = spec_.format.k, stride = spec_.x_stride(), groups = spec_.groups();
    const int64_t padded_groups = spec_.padded_groups(), group_rows = spec_.group_blocks() * 32;
    const int bits = spec_.format.bits;
    const float largest = float(spec_.activation_max());
    out.values.assign(size_t(m * stride), 0);
    out.scales.assign(size_t(m * padded_groups), 0.0f);
    out.sums.assign(size_t(m * padded_groups), 0.0f);
    int row_of[32];
    for (int k = 0; k < 32; ++k) row_of[k] = jit::sparse_block_row(bits, k);
    std::vector<int8_t> quantized(size_t(groups * group_rows));
    for (int64_t r = 0; r < m; ++r) {
        const float* xr = x + r * d_model;
        std::fill(quantized.begin(), quantized.end(), int8_t(0));
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t k0 = g * group_rows, k1 = std::min(d_model, k0 + group_rows);
            float amax = 0.0f;
            for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(xr[k]));
            const float step = amax / largest, inverse = amax > 0.0f ? largest / amax : 0.0f;
            int32_t sum = 0;
            for (int64_t k = k0; k < k1; ++k) {
                const int q = int(std::nearbyint(xr[k] * inverse));
                quantized[size_t(k)] = int8_t(q);
                sum += q;
            }
            out.scales[size_t(r * padded_groups + g)] = step;
            out.sums[size_t(r * padded_groups + g)] = step * float(sum);
        }
        int8_t* row = out.values.data() + r * stride;
        for (int64_t b = 0; b < stride / 32; ++b)
            for (int k = 0; k < 32; ++k) row[b * 32 + k] = quantized[size_t(b * 32 + row_of[k])];
    }
}

void SparseProductJit::products(const uint8_t* vectors, const int32_t* slots, int64_t count,
                                const SparseActivations& x, int64_t m, float* out) const {
    const int64_t stride = spec_.x_stride(), padded_groups = spec_.padded_groups();
    for (int64_t r0 = 0; r0 < m; r0 += kMaxRows) {
        const int rows = int(std::min<int64_t>(kMaxRows, m - r0));
        const jit::SparseProductArgs args{vectors,
                                          slots,
                                          count,
                                          x.values.data() + r0 * stride,
                                          x.scales.data() + r0 * padded_groups,
                                          x.sums.data() + r0 * padded_groups,
                                          out + r0,
                                          m};
        kernels_[rows - 1]->function<jit::SparseProductFn>()(&args);
    }
}

std::string SparseProductJit::describe() const {
    std::string names;
    for (const auto& kernel : kernels_) names += (names.empty() ? "" : ", ") + kernel->name();
    return names;
}

}  // namespace qjit
