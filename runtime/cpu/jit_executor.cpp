#include "runtime/cpu/jit_executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "jit/x86/gemm_emitter.hpp"
#include "base/error.hpp"
#include "base/half.hpp"
#include "format/inline_metadata.hpp"
#include "runtime/cpu/cache_eviction.hpp"
#include "runtime/cpu/outlier_add.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {

namespace {

void dump_kernel(const jit::JitGenerator& kernel, const std::string& dir) {
    const std::string path = concat(dir, "/", kernel.name(), ".bin");
    std::ofstream out(path, std::ios::binary);
    const auto bytes = kernel.code_bytes();
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!out) fail(QJIT_ERROR_IO, "QJIT_DUMP_DIR: cannot write '", path, "'");
    std::fprintf(stderr, "qjit: wrote %s (%zu bytes); disassemble: objdump -D -b binary -mi386:x86-64 %s\n",
                 path.c_str(), bytes.size(), path.c_str());
}

// The product passes in the kernels' argument terms. A pass that ends the layer's groups takes
// its shorter last group (groups of 32 rows and more) as the kernel's tail.
std::vector<JitExecutor::GroupRange> group_ranges(const jit::CpuKernelSpec& spec, const std::vector<Pass>& passes) {
    const int64_t groups = spec.num_groups(), blocks_per_group = std::max<int64_t>(1, spec.group_rows() / 32);
    const int64_t last_group_blocks = spec.padded_k() / 32 - (groups - 1) * blocks_per_group;
    const bool last_group_short = spec.group_rows() >= 32 && last_group_blocks < blocks_per_group;
    std::vector<JitExecutor::GroupRange> ranges;
    for (const Pass& pass : passes) {
        if (pass.kind != PassKind::Product) continue;
        require(product_fits(pass, spec.format, groups), "product pass over groups [", pass.first_group, ", ",
                pass.end_group, ") at ", pass.bits, " bits does not fit ", jit::kernel_name(spec));
        const bool has_short_tail = last_group_short && pass.end_group == groups;
        const int64_t first_block = spec.group_rows() == 16 ? pass.first_group / 2 : pass.first_group * blocks_per_group;
        ranges.push_back({pass.first_group, first_block, pass.end_group - pass.first_group - (has_short_tail ? 1 : 0),
                          has_short_tail ? last_group_blocks : 0});
    }
    return ranges;
}

// The rows of a forward's next row tile when `remaining` rows are left: a prompt tile where that
// many remain (prompt_rows > 0), else as many as the tiling's rows allow. The forward walks its
// rows with it, and the kernels a batch needs are those its walk meets.
struct RowTile {
    int64_t rows;
    bool prompt;
};
RowTile next_row_tile(int64_t remaining, int64_t prompt_rows, int64_t max_rows) {
    if (prompt_rows > 0 && remaining >= prompt_rows) return {prompt_rows, true};
    return {std::min(max_rows, remaining), false};
}

// The prompt tile's kernels (jit::prompt_tile), one per part of a panel, unless the forwards are
// of `only_batch` rows, fewer than a tile; sets `rows` to the tile's rows (0: none).
std::vector<std::unique_ptr<jit::JitGenerator>> generate_prompt_kernels(const jit::CpuKernelSpec& spec,
                                                                        int64_t only_batch, const std::string& dump_dir,
                                                                        int64_t& rows) {
    std::vector<std::unique_ptr<jit::JitGenerator>> kernels;
    rows = 0;
    const std::optional<jit::CpuKernelSpec> tile = jit::prompt_tile(spec);
    if (!tile || (only_batch > 0 && only_batch < tile->rows)) return kernels;
    rows = tile->rows;
    for (jit::CpuKernelSpec part = *tile; part.first_vector < spec.tiling.tu; part.first_vector += part.vectors) {
        kernels.push_back(jit::generate_cpu_kernel(part));
        if (!dump_dir.empty()) dump_kernel(*kernels.back(), dump_dir);
    }
    return kernels;
}

// The kernels for each activation-row count up to the tiling's rows a forward meets besides its
// prompt tiles: every count, or those a forward of `only_batch` rows meets; null where not generated.
std::vector<std::unique_ptr<jit::JitGenerator>> generate_kernels(const jit::CpuKernelSpec& spec, int64_t only_batch,
                                                                 int64_t prompt_rows, const std::string& dump_dir) {
    const int64_t max_rows = spec.tiling.mb;
    std::vector<bool> needed(size_t(max_rows), only_batch <= 0);
    for (int64_t m0 = 0; m0 < only_batch;) {
        const RowTile tile = next_row_tile(only_batch - m0, prompt_rows, max_rows);
        if (!tile.prompt) needed[size_t(tile.rows - 1)] = true;
        m0 += tile.rows;
    }
    std::vector<std::unique_ptr<jit::JitGenerator>> kernels;
    for (int rows = 1; rows <= max_rows; ++rows) {
        if (!needed[size_t(rows - 1)]) {
            kernels.push_back(nullptr);
            continue;
        }
        jit::CpuKernelSpec variant = spec;
        variant.rows = rows;
        kernels.push_back(jit::generate_cpu_kernel(variant));
        if (!dump_dir.empty()) dump_kernel(*kernels.back(), dump_dir);
    }
    return kernels;
}

}  // namespace

PanelMetadata packed_metadata(const jit::CpuKernelSpec& spec, const QuantParams& p, ThreadPool* pool) {
    const PanelMetadataLayout layout = jit::metadata_layout(spec);
    PanelMetadata metadata = allocate_panel_metadata(p, layout);
    const int64_t panels = (p.n + spec.panel_columns() - 1) / spec.panel_columns();
    auto pack_panel = [&](int64_t panel) { pack_panel_metadata(p, layout, panel, metadata); };
    if (pool != nullptr)
        pool->parallel_for(panels, pack_panel);
    else
        for (int64_t panel = 0; panel < panels; ++panel) pack_panel(panel);
    return metadata;
}

PackedCodes kernel_codes(const jit::CpuKernelSpec& spec, const QuantParams& params, PackedCodes codes,
                         ThreadPool* pool) {
    if (!spec.inline_metadata) return codes;
    return with_metadata_slots(codes, packed_metadata(spec, params, pool), jit::metadata_layout(spec),
                               spec.group_rows() / 32, jit::inline_slot_bytes(spec));
}

std::vector<Pass> jit_forward_plan(const jit::CpuKernelSpec& spec, const WeightFormat& format) {
    return plan_forward(format, spec.num_groups(), spec.tiling.ksplit, jit::groups_per_kernel_step(spec));
}

JitExecutor::JitExecutor(const jit::CpuKernelSpec& spec, const QuantParams& p, const std::vector<Pass>& passes,
                         const std::string& dump_dir, ThreadPool* pool, int64_t only_batch)
    : JitExecutor(spec, p, passes, dump_dir, spec.inline_metadata ? PanelMetadata{} : packed_metadata(spec, p, pool),
                  only_batch) {}

JitExecutor::JitExecutor(const jit::CpuKernelSpec& spec, const QuantParams& p, const std::vector<Pass>& passes,
                         const std::string& dump_dir, PanelMetadata metadata, int64_t only_batch)
    : spec_(spec),
      group_ranges_(group_ranges(spec, passes)),
      panels_((p.n + spec.panel_columns() - 1) / spec.panel_columns()),
      gathers_(has_pass(passes, PassKind::Gather)),
      only_batch_(only_batch),
      metadata_(std::move(metadata)) {
    const PanelMetadataSizes sizes = jit::beside_codes_metadata_sizes(spec, p);
    require(metadata_.scales.size() == sizes.scale_bytes && metadata_.zeros.size() == sizes.zero_bytes,
            "panel metadata of ", metadata_.scales.size(), " + ", metadata_.zeros.size(), " bytes for ",
            jit::kernel_name(spec), "; its layout takes ", sizes.scale_bytes, " + ", sizes.zero_bytes);
    const auto emission_start = std::chrono::steady_clock::now();
    prompt_kernels_ = generate_prompt_kernels(spec, only_batch, dump_dir, prompt_rows_);
    kernels_ = generate_kernels(spec, only_batch, prompt_rows_, dump_dir);
    emission_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - emission_start).count();

    if (!p.uniform_bits()) {
        group_bits_.assign(size_t(spec.num_groups()), p.group_bits.back());
        std::copy(p.group_bits.begin(), p.group_bits.end(), group_bits_.begin());
    }
    if (has_pass(passes, PassKind::Outliers)) {
        outliers_ = p.outliers_data;
        if (p.act_order)
            for (int32_t& row : outliers_.rows) row = p.row_order[size_t(row)];
        for (uint16_t value : outliers_.values) outlier_values_.push_back(half_to_float(value));
    }
}

void JitExecutor::evict_metadata() const {
    evict_from_caches(metadata_.scales);
    evict_from_caches(metadata_.zeros);
    evict_from_caches(group_bits_);
    evict_from_caches(outliers_.column_start);
    evict_from_caches(outliers_.rows);
    evict_from_caches(outlier_values_);
}

int64_t JitExecutor::metadata_bytes() const {
    return int64_t(metadata_.scales.size() + metadata_.zeros.size() + group_bits_.size() + outliers_.rows.size() * sizeof(int32_t) +
                   outlier_values_.size() * sizeof(float) + outliers_.column_start.size() * sizeof(int64_t));
}

void JitExecutor::forward(const QuantParams& p, const PackedCodes& codes, const float* x, int64_t m, float* y,
                          ThreadPool& pool) const {
    require(only_batch_ <= 0 || m == only_batch_, "this executor was made for forwards of ", only_batch_, " rows, not ", m);
    PreparedActivations act = prepare_activations(spec_, activation_row_order(p), x, m, pool);
    if (!outlier_values_.empty() && m > 1) {
        thread_local std::vector<float> transposed;
        act.source_transposed = transpose_for_outliers(act.source, m, p.k, transposed, pool);
    }

    // With a K split parts after the first write their own partial outputs, added below. (The
    // tasks run on other threads, which must see this thread's buffer, so they get its address.)
    thread_local std::vector<float> partial_buffer;
    const size_t partial_floats = size_t((k_parts() - 1) * m * p.n);
    if (partial_buffer.size() < partial_floats) partial_buffer.resize(partial_floats);
    float* const partials = partial_buffer.data();

    run_product_tasks(pool, product_tasks(), code_bytes(codes) * m, p.k * p.n * m,
                      [&](int64_t t) { run_product_task(p, codes, act, m, y, partials, t); });
    add_partials(y, partials, m, p.n);
}

// A task is one panel and one K part for every row tile: the row tiles after the first read the
// panel's codes from L2 instead of memory.
void JitExecutor::run_product_task(const QuantParams& p, const PackedCodes& codes, const PreparedActivations& act,
                                   int64_t m, float* y, float* partials, int64_t task) const {
    const int64_t panel = spec_.panel_columns(), groups = spec_.num_groups(), max_rows = spec_.tiling.mb;
    const int64_t tile_rows = std::max(max_rows, prompt_rows_);
    const int64_t x_bytes = spec_.path == jit::ActivationPath::Int8 ? 1 : 4;
    const int64_t p_index = task % panels_, part = task / panels_;
    const int64_t n0 = p_index * panel, width = std::min(panel, p.n - n0);
    const GroupRange& range = group_ranges_[size_t(part)];
    thread_local std::vector<float> tile;
    if (tile.size() < size_t(tile_rows * panel)) tile.resize(size_t(tile_rows * panel));

    jit::CpuKernelArgs args;
    args.codes = codes.panel(n0) + codes.block_offset(range.first_block);
    if (!spec_.inline_metadata) {
        const PanelMetadataOffsets metadata = panel_metadata_offsets(metadata_layout(), p_index, range.first);
        args.scales = metadata_.scales.data() + metadata.scales;
        args.zeros = metadata_.zeros.empty() ? nullptr : metadata_.zeros.data() + metadata.zeros;
    }
    args.group_bits = group_bits_.empty() ? nullptr : group_bits_.data() + range.first;
    args.y = tile.data();
    args.full_groups = range.full_groups;
    args.tail_blocks = range.tail_blocks;
    float* out = part == 0 ? y : partials + (part - 1) * m * p.n;
    for (int64_t m0 = 0, rows = 0; m0 < m; m0 += rows) {
        const RowTile row_tile = next_row_tile(m - m0, prompt_rows_, max_rows);
        rows = row_tile.rows;
        args.x = static_cast<const uint8_t*>(act.x) + (m0 * spec_.padded_k() + range.first_block * 32) * x_bytes;
        args.x_scale = act.scale + m0 * groups + range.first;
        args.x_sum = act.sum + m0 * groups + range.first;
        if (row_tile.prompt) {
            for (const auto& part : prompt_kernels_) part->function<jit::CpuKernelFn>()(&args);
        } else {
            kernels_[size_t(rows - 1)]->function<jit::CpuKernelFn>()(&args);
        }
        for (int64_t i = 0; i < rows; ++i)
            std::memcpy(out + (m0 + i) * p.n + n0, tile.data() + i * panel, size_t(width) * sizeof(float));
    }
    // The outlier pass, fused: the first K part adds the panel's outliers while its outputs are in
    // cache, for all rows at once (each pass over the outliers serves up to 16 rows).
    if (part == 0 && !outlier_values_.empty()) add_panel_outliers(act, m, n0, width, out, p.n);
}

void JitExecutor::add_panel_outliers(const PreparedActivations& act, int64_t m, int64_t n0, int64_t width, float* y,
                                     int64_t ldy) const {
    const OutlierColumns outliers{outliers_.column_start.data(), outliers_.rows.data(), outlier_values_.data()};
    if (act.source_transposed == nullptr) {  // one row
        add_outliers_one_row(outliers, act.source, n0, n0 + width, y);
        return;
    }
    add_outliers_transposed(outliers, act.source_transposed, m, m, n0, n0 + width, y, ldy);
}

void JitExecutor::add_partials(float* y, const float* partials, int64_t m, int64_t n) const {
    for (int64_t part = 1; part < k_parts(); ++part) {
        const float* partial = partials + (part - 1) * m * n;
        for (int64_t i = 0; i < m * n; ++i) y[i] += partial[i];
    }
}

}  // namespace qjit
