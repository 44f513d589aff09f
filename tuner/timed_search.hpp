// Timing candidates for real. The tuner owns the protocol (warm-up, repeats, medians, the check
// for unstable measurements, the budget); the caller owns what is timed: for each candidate it
// hands back a CandidateRun (runtime/candidate_bench builds them on synthetic weights).
#pragma once

#include <functional>
#include <limits>
#include <vector>

#include "tuner/search_space.hpp"

namespace qjit {

struct CandidateRun {
    std::function<void()> prepare;  // untimed, before every call (e.g. evict the weights from the caches)
    std::function<void()> run;      // the call that is timed
};

struct Measurement {
    double median_seconds = 0;
    double spread = 0;   // interquartile range over the median
    int samples = 0;
    bool stable = true;  // the spread settled under the threshold
};

// One warm-up call, then `repeats` timed calls. While the spread of the samples is above
// kUnstableSpread it takes `repeats` more (at most kMaxRounds rounds): a noisy neighbor or a
// frequency change shows up as spread, and more samples move the median back to the truth.
inline constexpr double kUnstableSpread = 0.05;
inline constexpr int kMaxRounds = 3;
Measurement measure(const CandidateRun& candidate, int repeats);

struct SearchResult {
    Candidate best;
    Measurement measured;
    int timed = 0;       // candidates timed
    int considered = 0;  // candidates in the ranked list
    double seconds = 0;  // wall time of the search
};

using MakeRun = std::function<CandidateRun(const jit::CpuKernelSpec&)>;

// Times the ranked candidates within `budget_seconds` (infinity: all of them, the exhaustive
// search), each screened with kScreenRepeats calls (always at least one candidate):
//  1. structure: the model's best variant of each register block (tu, mb), in the model's order,
//     until kStructureShare of the budget is spent. Knobs that matter most come first, since the
//     ranking is least sure between blocks and many variants of one block time alike;
//  2. refinement: the other variants (prefetch, k-unroll, K-split) of the kRefinedBlocks fastest
//     blocks, in the model's order, until kScreeningShare of the budget is spent;
//  3. confirmation: the kFinalists fastest screened, re-timed with kConfirmRepeats calls each,
//     interleaved so that drift in the machine's speed hits them alike; the fastest median wins.
// `ranked` must not be empty.
inline constexpr int kScreenRepeats = 3;
inline constexpr int kConfirmRepeats = 7;
inline constexpr int kFinalists = 4;
inline constexpr int kRefinedBlocks = 2;
inline constexpr double kStructureShare = 0.4;
inline constexpr double kScreeningShare = 0.7;
SearchResult timed_search(const std::vector<Candidate>& ranked, const MakeRun& make_run,
                          double budget_seconds = std::numeric_limits<double>::infinity());

}  // namespace qjit
