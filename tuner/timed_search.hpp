// Timing candidates for real, the same way for every backend. The tuner owns the protocol
// (warm-up, repeats, medians, the check for unstable measurements, the budget and the order in
// which candidates are screened); a backend owns what is timed: for each candidate it hands back
// a TimedCall that runs one call and says how long it took (the steady clock around a host call,
// CUDA events around a launch). Tests inject both the calls' times and the budget's clock.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace qjit {

// Runs one call of a candidate (after any untimed preparation) and returns its seconds.
using TimedCall = std::function<double()>;

// A host call: `prepare` untimed before every call (e.g. evict the weights from the caches), then
// `run` timed with the steady clock.
struct CandidateRun {
    std::function<void()> prepare;
    std::function<void()> run;
};
TimedCall timed_on_host(CandidateRun candidate);

// Seconds on a monotonic clock: what the search's budget is spent against.
using SecondsClock = std::function<double()>;
double steady_seconds();

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
Measurement measure(const TimedCall& call, int repeats);

struct SearchResult {
    size_t best = 0;     // index into the ranked candidates
    Measurement measured;
    int timed = 0;       // candidates timed
    int considered = 0;  // candidates in the ranked list
    double seconds = 0;  // time of the search on its clock
};

// Makes the timed call of ranked candidate i (called once per candidate screened).
using MakeTimedCall = std::function<TimedCall(size_t)>;

// Times ranked candidates within `budget_seconds` (infinity: all of them, the exhaustive search),
// each screened with kScreenRepeats calls (always at least one candidate): the candidates of a
// phase are made and warmed up, then timed in interleaved rounds (one call of each per round, and
// more rounds for those whose spread is unstable, as measure()), so that a slow spell of a shared
// machine slows them alike. `structures[i]` names
// candidate i's structure (CPU: its register block; GPU: its kernel kind and tile); candidates of
// one structure differ only in knobs that matter less (prefetch, unrolling, pipeline depth, split).
//  1. structure: the model's best candidate of each structure, in the model's order, until
//     kStructureShare of the budget is spent. Knobs that matter most come first, since the
//     ranking is least sure between structures and many variants of one structure time alike;
//  2. refinement: the other candidates of the screened structures, fastest structure first and
//     each structure's in the model's order, until kScreeningShare of the budget is spent (a
//     small layer's budget covers every structure; a large one's, the fastest few);
//  3. confirmation: the kFinalists fastest screened, at most half of them of one structure
//     while others can take the places (the refinement's variants, screened at one moment, must
//     not crowd out a rival structure screened at another), re-timed with kConfirmRepeats calls
//     each, interleaved so that drift in the machine's speed hits them alike; the fastest median
//     wins.
// `structures` must not be empty.
inline constexpr int kScreenRepeats = 3;
inline constexpr int kConfirmRepeats = 7;
inline constexpr int kFinalists = 4;
inline constexpr double kStructureShare = 0.4;
inline constexpr double kScreeningShare = 0.7;
SearchResult timed_search(const std::vector<std::string>& structures, const MakeTimedCall& make_call,
                          double budget_seconds = std::numeric_limits<double>::infinity(),
                          const SecondsClock& clock = steady_seconds);

}  // namespace qjit
