#include "runtime/cpu/candidate_bench.hpp"

#include <algorithm>
#include <memory>

#include "jit/x86/gemm_emitter.hpp"
#include "runtime/cpu/cache_eviction.hpp"
#include "runtime/cpu/jit_executor.hpp"

namespace qjit {

CandidateBench::CandidateBench(const TuningProblem& problem, const std::vector<Candidate>& candidates,
                               int64_t max_columns, ThreadPool& pool)
    : problem_(problem), pool_(pool) {
    const jit::CpuKernelSpec& f = problem.kernel;
    static_cast<WeightFormat&>(params_) = f.format;
    params_.n = max_columns;
    params_.act_order = false;  // no row order: the gather pass is not part of what is timed
    params_.outliers = 0;       // nor the outlier term, whose cost no tiling changes
    // Indexed [group * n + column] for any n up to max_columns: the values are all alike.
    const size_t metadata = size_t(params_.num_groups() * max_columns);
    params_.scales.assign(metadata, 0.01f);
    if (f.format.float_offsets) params_.offsets.assign(metadata, -0.25f);
    else if (!f.format.symmetric) params_.zeros.assign(metadata, uint16_t(1 << (f.format.bits - 1)));
    if (f.format.second_order_scales()) {
        params_.second_order.codes.assign(metadata, 5);
        params_.second_order.scales.assign(size_t(params_.num_groups() * SecondOrderScales::column_groups(max_columns)), 0x2000);
        params_.second_order.zeros = params_.second_order.scales;
    }
    if (f.format.super_block_scales()) {
        const size_t supers = size_t(f.format.k / kSuperBlockRows * max_columns);
        params_.super_block.scale_codes.assign(metadata, 5);
        params_.super_block.scales.assign(supers, 0x2000);
        if (f.format.float_offsets) {
            params_.super_block.min_codes.assign(metadata, 3);
            params_.super_block.mins.assign(supers, 0x2000);
        }
    }

    size_t words = 0;
    for (const Candidate& c : candidates)
        words = std::max(words, size_t(jit::kernel_stream_words(c.spec, max_columns)));
    codes_.bits = f.format.bits;
    codes_.k = f.format.k;
    assign_block_widths(codes_, block_widths(f.format));
    codes_.words.assign(words, 0x5a3c96e1u);  // every page written: no page faults while timing

    x_.resize(size_t(problem.batch * f.format.k));
    for (size_t i = 0; i < x_.size(); ++i) x_[i] = float(int(i % 17) - 8) * 0.125f;
    y_.resize(size_t(problem.batch * max_columns));
}

int64_t forward_weight_bytes(const jit::CpuKernelSpec& spec, int64_t n) {
    WeightFormat format = spec.format;
    format.n = n;
    const PanelMetadataSizes metadata = jit::beside_codes_metadata_sizes(spec, format);
    return jit::kernel_stream_words(spec, n) * 4 + int64_t(metadata.scale_bytes + metadata.zero_bytes);
}

CandidateRun CandidateBench::make_run(const jit::CpuKernelSpec& spec, int64_t columns) {
    params_.n = columns;
    auto executor = std::make_shared<const JitExecutor>(spec, params_, jit_forward_plan(spec, params_), "", nullptr,
                                                        problem_.batch);
    const size_t code_bytes = size_t(jit::kernel_stream_words(spec, columns)) * 4;
    CandidateRun candidate;
    candidate.prepare = [this, executor, code_bytes] {
        evict_from_caches(codes_.words.data(), code_bytes);
        executor->evict_metadata();
    };
    candidate.run = [this, executor, columns] {
        params_.n = codes_.n = columns;
        codes_.panel_columns = executor->spec().panel_columns();
        jit::assign_kernel_slots(executor->spec(), codes_);
        executor->forward(params_, codes_, x_.data(), problem_.batch, y_.data(), pool_);
    };
    return candidate;
}

}  // namespace qjit
