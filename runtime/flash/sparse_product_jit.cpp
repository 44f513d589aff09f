#include "runtime/flash/sparse_product_jit.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include "base/error.hpp"
#include "base/half.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {

namespace {

constexpr int kMaxRows = 4;
constexpr int kMaxDownRows = 2;
// Slots one call of a down kernel takes: their lines of a task's blocks stay in the cache while
// the kernel's passes walk the blocks.
constexpr int64_t kDownSlotsPerCall = 128;
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

// The tiling with at most as many vectors (or blocks) a pass as `rows` rows leave registers for.
jit::SparseProductTiling fitted(jit::SparseProductSpec spec, jit::SparsePass pass, int rows,
                                jit::SparseProductTiling tiling) {
    spec.pass = pass;
    spec.rows = rows;
    spec.tiling = tiling;
    if (pass == jit::SparsePass::Products) spec.tiling.blocks = 1;
    else spec.tiling.vectors = 1;
    while (spec.tiling.vectors > 1 && jit::vector_registers_needed(spec) > 16) --spec.tiling.vectors;
    while (spec.tiling.blocks > 1 && jit::vector_registers_needed(spec) > 16) --spec.tiling.blocks;
    return spec.tiling;
}

bool fits(jit::SparseProductSpec spec, jit::SparsePass pass, int rows, jit::SparseProductTiling tiling) {
    spec.pass = pass;
    spec.rows = rows;
    spec.tiling = tiling;
    return jit::vector_registers_needed(spec) <= 16;
}

template <typename Run>
double median_seconds(Run&& run) {
    std::vector<double> seconds;
    for (int rep = 0; rep <= kTimingRepeats; ++rep) {
        const auto start = std::chrono::steady_clock::now();
        run();
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        if (rep > 0) seconds.push_back(took.count());  // the first warms the code
    }
    std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
    return seconds[seconds.size() / 2];
}

// Vectors of the spec's format with valid metadata (scales near 1/16, any codes and zero points).
std::vector<uint8_t> synthetic_vectors(const jit::SparseProductSpec& spec, int64_t count) {
    std::vector<uint8_t> bytes(size_t(count * spec.vector_bytes + jit::kSparseVectorPadding));
    uint64_t state = 0x9e3779b97f4a7c15u;  // xorshift: any codes do, and 8 MB of them must be quick
    for (size_t at = 0; at + 8 <= bytes.size(); at += 8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        std::memcpy(bytes.data() + at, &state, 8);
    }
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
    for (int rows = 1; rows <= kMaxRows; ++rows)
        generate(jit::SparsePass::Products, rows, fitted(spec_, jit::SparsePass::Products, rows, tiling));
    for (int rows = 1; rows <= kMaxDownRows; ++rows) {
        const jit::SparseProductTiling down = fitted(spec_, jit::SparsePass::Down, rows, tiling);
        if (fits(spec_, jit::SparsePass::Down, rows, down)) generate(jit::SparsePass::Down, rows, down);
    }
}

SparseProductJit::SparseProductJit(const NeuronCache::Data& d, jit::IsaFeatures isa, Tuned) : spec_(spec_of(d, isa)) {
    const int64_t vectors = std::clamp<int64_t>(kTimingBytes / spec_.vector_bytes, 64, 1 << 16);
    const std::vector<uint8_t> buffer = synthetic_vectors(spec_, vectors);
    std::mt19937 random(11);
    std::vector<int32_t> slots(size_t(std::min(vectors, kTimingSlots)));
    for (int32_t& s : slots) s = int32_t(random() % uint32_t(vectors));
    const int64_t count = int64_t(slots.size()), blocks = (spec_.format.k + 31) / 32;
    std::vector<float> x(size_t(kMaxRows * spec_.format.k)), y(x.size());
    for (float& v : x) v = float(int(random() % 255) - 127) / 64.0f;
    const std::vector<float> a(size_t(kMaxRows * count), 0.01f);
    SparseActivations prepared;
    std::vector<float> out(slots.size() * kMaxRows);

    // Each pass and row count: every tiling its registers allow, timed; the fastest kept.
    for (jit::SparsePass pass : {jit::SparsePass::Products, jit::SparsePass::Down})
        for (int rows = 1; rows <= (pass == jit::SparsePass::Products ? kMaxRows : kMaxDownRows); ++rows) {
            double best_seconds = INFINITY;
            std::optional<jit::SparseProductTiling> best;
            for (int width = 1; width <= 4; ++width)
                for (int prefetch = 0; prefetch <= 1; ++prefetch) {
                    const jit::SparseProductTiling tiling = pass == jit::SparsePass::Products
                                                                ? jit::SparseProductTiling{width, 1, prefetch}
                                                                : jit::SparseProductTiling{1, width, prefetch};
                    if (width > 2 && pass == jit::SparsePass::Down) continue;
                    if (!fits(spec_, pass, rows, tiling)) continue;
                    generate(pass, rows, tiling);
                    const double seconds = pass == jit::SparsePass::Products ? median_seconds([&] {
                        prepare(x.data(), rows, prepared);
                        products(buffer.data(), slots.data(), count, prepared, rows, out.data());
                    }) : median_seconds([&] {
                        down(buffer.data(), slots.data(), count, a.data(), rows, 0, blocks, y.data());
                    });
                    if (seconds < best_seconds) {
                        best_seconds = seconds;
                        best = tiling;
                    }
                }
            if (best) generate(pass, rows, *best);
        }
}

SparseProductJit::~SparseProductJit() = default;

const SparseProductJit* SparseProductJit::for_cache(const NeuronCache::Data& d) {
    if (!d.quantized) return nullptr;
    const jit::IsaFeatures isa = jit::IsaFeatures::of(d.isa);  // the context's cap
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

void SparseProductJit::generate(jit::SparsePass pass, int rows, jit::SparseProductTiling tiling) {
    jit::SparseProductSpec spec = spec_;
    spec.pass = pass;
    spec.rows = rows;
    spec.tiling = tiling;
    auto& kernel = pass == jit::SparsePass::Products ? products_[rows - 1] : down_[rows - 1];
    kernel = jit::generate_sparse_kernel(spec);
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
        products_[rows - 1]->function<jit::SparseProductFn>()(&args);
    }
}

void SparseProductJit::down(const uint8_t* vectors, const int32_t* slots, int64_t count, const float* a, int64_t m,
                            int64_t b0, int64_t b1, float* y) const {
    const int64_t stride = (b1 - b0) * 32, d_model = spec_.format.k;
    thread_local std::vector<float> sums;  // [m][stride] in the kernels' row order; grows to its largest once
    sums.assign(size_t(m * stride), 0.0f);
    const int widest = down_[1] ? 2 : 1;
    for (int64_t r0 = 0; r0 < m; r0 += widest) {
        const int rows = int(std::min<int64_t>(widest, m - r0));
        for (int64_t i0 = 0; i0 < count; i0 += kDownSlotsPerCall) {
            const jit::SparseDownArgs args{vectors,     slots + i0, std::min(kDownSlotsPerCall, count - i0),
                                           a + r0 * count + i0, count, sums.data() + r0 * stride, stride, b0, b1};
            down_[rows - 1]->function<jit::SparseDownFn>()(&args);
        }
    }
    int row_of[32];
    for (int k = 0; k < 32; ++k) row_of[k] = jit::sparse_block_row(spec_.format.bits, k);
    for (int64_t r = 0; r < m; ++r)
        for (int64_t b = b0; b < b1; ++b) {
            const float* block = sums.data() + r * stride + (b - b0) * 32;
            float* yr = y + r * d_model + b * 32;
            const int64_t rows = std::min<int64_t>(32, d_model - b * 32);
            for (int k = 0; k < 32; ++k)
                if (row_of[k] < rows) yr[row_of[k]] += block[k];
        }
}

std::string SparseProductJit::describe() const {
    std::string names;
    const auto add = [&](const std::unique_ptr<jit::JitGenerator>& kernel) {
        if (kernel) names += (names.empty() ? "" : ", ") + kernel->name();
    };
    for (const auto& kernel : products_) add(kernel);
    for (const auto& kernel : down_) add(kernel);
    return names;
}

}  // namespace qjit
