// The kernel rules of the x86 GEMM emitter that callers also need (gemm_emitter.hpp): the widths a
// kernel handles, how it takes activations, its register budget and the prompt tile.
#include <algorithm>
#include <cstdint>

#include "format/code_planes.hpp"
#include "jit/x86/gemm_emitter.hpp"

namespace qjit::jit {

std::vector<int> kernel_widths(const CpuKernelSpec& spec) {
    if (spec.format.uniform_bits()) return {spec.format.bits};
    std::vector<int> widths(spec.format.group_bits.begin(), spec.format.group_bits.end());
    std::sort(widths.begin(), widths.end());
    widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
    return widths;
}

bool embedded_broadcast(const CpuKernelSpec& spec) {
    return spec.isa.avx512 && (spec.path == ActivationPath::F32 || spec.vnni());
}

bool merges_code_planes(const CpuKernelSpec& spec) {
    return spec.path == ActivationPath::Int8 && code_planes(spec.format.bits).size() > 1;
}

int codebook_constants(const CpuKernelSpec& spec) {
    if (!spec.format.has_codebook()) return 0;
    return spec.path == ActivationPath::F32 ? 2 : 1;
}

namespace {

// The largest int16 pair sum of one quad's vpmaddubsw: two of the largest code byte a dot product
// multiplies times the largest activation.
int largest_pair_sum(const CpuKernelSpec& spec) {
    int largest = (1 << kernel_widths(spec).back()) - 1;
    if (spec.format.has_codebook()) {
        largest = 0;
        for (int code = 0; code < 16; ++code) largest = std::max(largest, int(uint8_t(spec.format.value_of(code))));
    }
    return 2 * largest * spec.int8_activation_max();
}

}  // namespace

int pair_sum_depth(const CpuKernelSpec& spec) {
    if (!spec.integer_sub_block_scales()) return 1;
    return int(std::clamp<int64_t>(INT16_MAX / largest_pair_sum(spec), 1, spec.group_rows() / 4));
}

bool group_sums_in_int16(const CpuKernelSpec& spec) {
    return pairs_sum_by_ones(spec) && spec.group_rows() <= 32 &&
           spec.group_rows() / 4 * largest_pair_sum(spec) <= INT16_MAX;
}

int accumulator_registers(const CpuKernelSpec& spec) {
    return spec.kernel_vectors() * spec.rows * (pair_sum_depth(spec) > 1 ? 2 : 1);
}

bool pairs_sum_by_ones(const CpuKernelSpec& spec) {
    return spec.path == ActivationPath::Int8 && !spec.vnni() && !spec.integer_sub_block_scales();
}

bool broadcasts_per_dot(const CpuKernelSpec& spec) {
    constexpr int kScarceRegisters = 16;  // AVX2's; AVX-512's 32 leave its K-quant tiles rows enough
    return spec.integer_sub_block_scales() && !embedded_broadcast(spec) && spec.kernel_vectors() == 1 &&
           vector_registers_available(spec.isa) <= kScarceRegisters;
}

int activation_broadcasts(const CpuKernelSpec& spec) {
    if (embedded_broadcast(spec)) return 0;
    return broadcasts_per_dot(spec) ? 1 : spec.rows;
}

int main_scratch_registers(const CpuKernelSpec& spec) {
    const bool pair_sums = spec.path == ActivationPath::Int8 && !spec.vnni();
    const int broadcasts = activation_broadcasts(spec);
    const int high_plane = merges_code_planes(spec) ? spec.kernel_vectors() + 1 : 0;
    return spec.kernel_vectors() + 1 + high_plane + broadcasts + (pair_sums ? 1 : 0);
}

SpareRegisterUse spare_register_use(const CpuKernelSpec& spec) {
    int spare = vector_registers_available(spec.isa) - vector_registers_needed(spec);
    SpareRegisterUse use;
    // The epilogues broadcast the symmetric zero point wherever a format has one for every column.
    if (spec.format.symmetric && !spec.format.second_order_scales() && spare >= 1) {
        use.zero_point = true;
        --spare;
    }
    use.output_tile = spare >= spec.kernel_vectors() * spec.rows;
    return use;
}

std::optional<CpuKernelSpec> prompt_tile(const CpuKernelSpec& spec) {
    // With embedded broadcasts every dot product loads its own activations, so taller tiles save
    // no broadcasts, and narrower parts decode more weights per dot: measured slower (AVX-512 VNNI).
    if (embedded_broadcast(spec)) return std::nullopt;
    constexpr int kMostRows = 16;
    std::optional<CpuKernelSpec> best;
    for (int vectors = 1; vectors <= spec.tiling.tu; ++vectors) {
        if (spec.tiling.tu % vectors != 0) continue;
        CpuKernelSpec part = spec;
        part.first_vector = 0;
        part.vectors = vectors;
        int rows = 0;
        for (int r = 1; r <= kMostRows; ++r) {
            part.rows = r;
            if (vector_registers_needed(part) > vector_registers_available(part.isa)) break;
            rows = r;
        }
        if (rows <= spec.tiling.mb) continue;
        part.rows = rows;
        const auto accumulators = [](const CpuKernelSpec& s) { return s.vectors * s.rows; };
        if (!best || accumulators(part) > accumulators(*best) ||
            (accumulators(part) == accumulators(*best) && part.rows > best->rows))
            best = part;
    }
    return best;
}

}  // namespace qjit::jit
