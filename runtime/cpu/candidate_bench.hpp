// Synthetic weights of a tuning problem's shape (or of the slices of its columns that candidates
// are timed on), and the CandidateRuns that time a tiling on them. A kernel's speed does not
// depend on the weights' values, so tuning needs neither the layer's data nor a repack of it per
// panel width: one code buffer, big enough for the widest candidate's columns and padding,
// serves every candidate, and the result holds for every layer of the shape.
#pragma once

#include <vector>

#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "tuner/search_space.hpp"
#include "tuner/timed_search.hpp"

namespace qjit {

// Weight bytes a forward of `spec` over n columns streams (codes of the padded panels, scales,
// zero points).
int64_t forward_weight_bytes(const jit::CpuKernelSpec& spec, int64_t n);

class CandidateBench {
public:
    // Sized for every candidate in `candidates` over at most `max_columns` of the problem's columns.
    CandidateBench(const TuningProblem& problem, const std::vector<Candidate>& candidates, int64_t max_columns,
                   ThreadPool& pool);
    CandidateBench(const CandidateBench&) = delete;
    CandidateBench& operator=(const CandidateBench&) = delete;

    // Generates the kernels of `spec`. prepare() evicts the weights from the caches; run() is one
    // forward of the problem's batch over `columns` columns (at most max_columns). The bench must
    // outlive the run.
    CandidateRun make_run(const jit::CpuKernelSpec& spec, int64_t columns);

private:
    TuningProblem problem_;
    ThreadPool& pool_;
    QuantParams params_;       // synthetic scales and zero points for max_columns; n is set per run
    PackedCodes codes_;        // synthetic codes; n and panel_columns are set per run
    std::vector<float> x_, y_;
};

}  // namespace qjit
