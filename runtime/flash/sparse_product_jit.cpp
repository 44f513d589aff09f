#include "runtime/flash/sparse_product_jit.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "base/error.hpp"
#include "base/half.hpp"
#include "tuner/hardware_probe.hpp"

namespace qjit {

namespace {

constexpr int kMaxRows = 4;
constexpr int kMaxDownRows = 2;
// Slots one call of a down kernel takes: their lines of a task's blocks stay in the cache while
// the kernel's passes walk the blocks.
constexpr int64_t kDownSlotsPerCall = 128;
constexpr int64_t kTimingBytes = int64_t(8) << 20;  // past the caches: products stream their vectors
constexpr int64_t kTimingSlots = 512;

jit::SparseProductSpec spec_of(const NeuronCache::Data& d, jit::IsaFeatures isa) {
    jit::SparseProductSpec spec;
    spec.format = d.header.vector.format;
    spec.format.k = d.d_model;
    spec.format.n = 1;
    spec.vector_bytes = d.vector_bytes;
    spec.isa = isa;
    return spec;
}

jit::SparseProductSpec kernel_spec(jit::SparseProductSpec spec, jit::SparsePass pass, int rows,
                                   jit::SparseProductTiling tiling) {
    spec.pass = pass;
    spec.rows = rows;
    spec.tiling = tiling;
    return spec;
}

bool fits(const jit::SparseProductSpec& spec, jit::SparsePass pass, int rows, jit::SparseProductTiling tiling) {
    return jit::vector_registers_needed(kernel_spec(spec, pass, rows, tiling)) <= 16;
}

// The tiling with at most as many vectors (or blocks) a pass as `rows` rows leave registers for.
jit::SparseProductTiling fitted(const jit::SparseProductSpec& spec, jit::SparsePass pass, int rows,
                                jit::SparseProductTiling tiling) {
    if (pass == jit::SparsePass::Products) tiling.blocks = 1;
    else tiling.vectors = 1;
    while (tiling.vectors > 1 && !fits(spec, pass, rows, tiling)) --tiling.vectors;
    while (tiling.blocks > 1 && !fits(spec, pass, rows, tiling)) --tiling.blocks;
    return tiling;
}

int max_rows(jit::SparsePass pass) { return pass == jit::SparsePass::Products ? kMaxRows : kMaxDownRows; }

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

// What candidates run on: kernels to swap tilings in, 8 MB of synthetic vectors, 512 slots
// scattered over them, and rows of x. Made when the first candidate is timed.
struct SparseTimingRig {
    SparseTimingRig(const NeuronCache::Data& d, const jit::SparseProductSpec& spec)
        : kernels(d, spec.isa, jit::SparseProductTiling{}),
          vectors(std::clamp<int64_t>(kTimingBytes / spec.vector_bytes, 64, 1 << 16)),
          buffer(synthetic_vectors(spec, vectors)),
          slots(size_t(std::min(vectors, kTimingSlots))),
          x(size_t(kMaxRows * spec.format.k)),
          y(x.size()),
          a(size_t(kMaxRows * kTimingSlots), 0.01f),
          out(slots.size() * kMaxRows) {
        std::mt19937 random(11);
        for (int32_t& s : slots) s = int32_t(random() % uint32_t(vectors));
        for (float& v : x) v = float(int(random() % 255) - 127) / 64.0f;
    }
    SparseProductJit kernels;
    int64_t vectors;
    std::vector<uint8_t> buffer;
    std::vector<int32_t> slots;
    std::vector<float> x, y, a;
    SparseActivations prepared;
    std::vector<float> out;
};

// One kernel of the set (a pass and a row count) as the tuner sees it: the tilings its registers
// allow, ranked by a fixed preference (two or more independent chains, then prefetch), each timed
// on the rig's synthetic vectors.
class SparseKernelTarget final : public TuningTarget {
public:
    SparseKernelTarget(const NeuronCache::Data& d, const jit::SparseProductSpec& spec, jit::SparsePass pass, int rows,
                       std::unique_ptr<SparseTimingRig>& rig)
        : d_(d), spec_(spec), pass_(pass), rows_(rows), rig_(rig) {}

    // "q4g32_asym_sparse_i8_avx2 K=576 m=2 threads=1": the kernel name less its tiling.
    std::string kernel_key() const override {
        const bool products = pass_ == jit::SparsePass::Products;
        return concat(spec_.format.kernel_name(), products ? "_sparse_i8_" : "_sparse_down_", spec_.isa.tag(),
                      " K=", spec_.format.k, " m=", rows_, " threads=1");
    }
    std::string fingerprint() const override { return probe_cpu().fingerprint; }

    std::vector<RankedTiling> rank(bool) override {
        const bool products = pass_ == jit::SparsePass::Products;
        std::vector<RankedTiling> ranked;
        for (const int width : products ? std::vector<int>{2, 3, 4, 1} : std::vector<int>{2, 1})
            for (const int prefetch : {1, 0}) {
                const jit::SparseProductTiling t{products ? width : 1, products ? 1 : width, prefetch};
                if (fits(spec_, pass_, rows_, t)) ranked.push_back({jit::tiling_text(t), concat(products ? "v" : "b", width)});
            }
        require(!ranked.empty(), "no sparse tiling fits the registers for ", kernel_key());
        return ranked;
    }

    std::string accept(const std::string& text) override {
        const jit::SparseProductTiling t = jit::parse_sparse_tiling(text);
        jit::check_spec(kernel_spec(spec_, pass_, rows_, t));
        return jit::tiling_text(t);
    }
    std::string complete_forced(const std::string& text) override { return accept(text); }

    TimedCall timed_call(const RankedTiling& candidate) override {
        if (!rig_) rig_ = std::make_unique<SparseTimingRig>(d_, spec_);
        SparseTimingRig& b = *rig_;
        b.kernels.use_tiling(pass_, rows_, jit::parse_sparse_tiling(candidate.text));
        const int64_t count = int64_t(b.slots.size()), blocks = (spec_.format.k + 31) / 32;
        const int rows = rows_;
        const SparseProductJit& kernels = b.kernels;
        if (pass_ == jit::SparsePass::Products)
            return timed_on_host({nullptr, [&b, &kernels, rows, count] {
                                      kernels.prepare(b.x.data(), rows, b.prepared);
                                      kernels.products(b.buffer.data(), b.slots.data(), count, b.prepared, rows,
                                                       b.out.data());
                                  }});
        return timed_on_host({nullptr, [&b, &kernels, rows, count, blocks] {
                                  kernels.down(b.buffer.data(), b.slots.data(), count, b.a.data(), rows, 0, blocks,
                                               b.y.data());
                              }});
    }

    double weight_bytes(const std::string&) override { return double(kTimingSlots * spec_.vector_bytes); }

private:
    const NeuronCache::Data& d_;
    jit::SparseProductSpec spec_;
    jit::SparsePass pass_;
    int rows_;
    std::unique_ptr<SparseTimingRig>& rig_;
};

// The generated kernel sets of this process, one per format, ISA and set of tilings: every cache of
// a file (one a layer) shares one.
struct Registry {
    std::mutex mutex;
    std::map<std::string, std::unique_ptr<SparseProductJit>> kernels;
};

}  // namespace

SparseProductJit::SparseProductJit(const NeuronCache::Data& d, jit::IsaFeatures isa, jit::SparseProductTiling tiling)
    : spec_(spec_of(d, isa)) {
    for (jit::SparsePass pass : {jit::SparsePass::Products, jit::SparsePass::Down})
        for (int rows = 1; rows <= max_rows(pass); ++rows) {
            const jit::SparseProductTiling t = fitted(spec_, pass, rows, tiling);
            if (fits(spec_, pass, rows, t)) use_tiling(pass, rows, t);
        }
}

SparseProductJit::~SparseProductJit() = default;

const SparseProductJit* SparseProductJit::for_cache(const NeuronCache::Data& d, const SparseKernelTuning& tuning) {
    if (!d.quantized) return nullptr;
    const jit::IsaFeatures isa = jit::IsaFeatures::of(d.isa);  // the context's cap
    const jit::SparseProductSpec spec = spec_of(d, isa);
    if (!isa.avx2 || !jit::sparse_product_unsupported_reason(spec.format).empty()) return nullptr;
    try {
        jit::check_spec(kernel_spec(spec, jit::SparsePass::Products, 1, {}));
    } catch (const Error&) {
        return nullptr;  // a geometry the kernels refuse (it reads too far past a vector): the hand-written path
    }
    // Each pass and row count through the one tuning sequence; the kernels of the chosen tilings name the set.
    TuningMemory untimed;  // no context: the model's picks, remembered nowhere
    TuningMemory& memory = tuning.memory ? *tuning.memory : untimed;
    const TuningPolicy policy = tuning.memory ? tuning.policy : TuningPolicy{.budget_ms = 0};
    std::unique_ptr<SparseTimingRig> rig;
    std::map<std::pair<jit::SparsePass, int>, jit::SparseProductTiling> chosen;
    std::string key;
    for (jit::SparsePass pass : {jit::SparsePass::Products, jit::SparsePass::Down})
        for (int rows = 1; rows <= max_rows(pass); ++rows) {
            if (!fits(spec, pass, rows, fitted(spec, pass, rows, {}))) continue;
            SparseKernelTarget target(d, spec, pass, rows, rig);
            const jit::SparseProductTiling t = jit::parse_sparse_tiling(tune(target, policy, memory).tiling);
            chosen[{pass, rows}] = t;
            key += jit::kernel_name(kernel_spec(spec, pass, rows, t)) + " ";
        }
    key += concat("K=", spec.format.k);

    static Registry registry;
    std::lock_guard lock(registry.mutex);
    auto& entry = registry.kernels[key];
    if (!entry) {
        entry.reset(new SparseProductJit(d, isa, jit::SparseProductTiling{}));
        for (const auto& [which, t] : chosen) entry->use_tiling(which.first, which.second, t);
    }
    return entry.get();
}

void SparseProductJit::use_tiling(jit::SparsePass pass, int rows, jit::SparseProductTiling tiling) {
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
