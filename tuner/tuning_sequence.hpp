// The one sequence every backend's tiling goes through at layer creation:
//   forced -> this context's earlier choice -> the tuning database -> the model's pick (budget 0)
//   -> a timed search within the budget -> stored in the context and the database.
// A backend supplies a TuningTarget: its kernel key and hardware, its ranked candidates, how to
// time one, and how to read a tiling's text. Tilings cross this seam as text (the database's
// form), so the sequence knows nothing of any backend's knobs.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "qjit/qjit.h"
#include "tuner/timed_search.hpp"
#include "tuner/tuning_db.hpp"

namespace qjit {

struct RankedTiling {
    std::string text;       // the tiling, in the backend's text form
    std::string structure;  // candidates of one structure are variants (timed_search's structures)
};

class TuningTarget {
public:
    virtual ~TuningTarget() = default;
    // "q4g128_asym_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2": the database key.
    virtual std::string kernel_key() const = 0;
    // The hardware the target's records are valid on.
    virtual std::string fingerprint() const = 0;
    // Candidates, best predicted first; `prune`: drop what the model's budgets rule out (the
    // target falls back to every candidate when nothing survives). Throws when there is none.
    virtual std::vector<RankedTiling> rank(bool prune) = 0;
    // The canonical text of a stored tiling, or throws an Error saying why this build or device
    // cannot use it.
    virtual std::string accept(const std::string& text) = 0;
    // A forced tiling completed to every knob (knobs left out chosen by the target). Throws an
    // invalid-argument Error naming the bad knob.
    virtual std::string complete_forced(const std::string& text) = 0;
    // Times one call of a ranked candidate (called once per candidate screened).
    virtual TimedCall timed_call(const RankedTiling& candidate) = 0;
    // Weight bytes a forward with this tiling streams (the record's GB/s).
    virtual double weight_bytes(const std::string& text) = 0;
};

// What a context remembers between layers: its tuning database (opened on first use) and the
// choices it made, by kernel key. `mutex` is held while a layer is tuned, so that two creations
// never time candidates against each other.
struct TuningMemory {
    std::mutex mutex;
    std::string db_path;  // empty: no database
    std::unique_ptr<TuningDb> db;
    std::map<std::string, TuningRecord> tuned;
    // The database, opened (loaded) on first use; null without a path. The caller holds `mutex`.
    TuningDb* database();
};

struct TuningPolicy {
    std::string forced;  // a forced tiling ("" for none)
    qjit_tuning_mode mode = QJIT_TUNING_DEFAULT;
    double budget_ms = 300;  // 0: the model's pick, untimed (unless exhaustive)
    bool may_search = true;  // false: never time (a choice made on first use of a bucket)
};

struct TuningOutcome {
    std::string tiling;  // the target's text
    qjit_tiling_source source = QJIT_TILING_MODEL;
    std::string kernel_key;
    double tuning_ms = 0;
    double measured_us = 0;  // 0: untimed
    int timed = 0, ranked = 0;
    std::string warning;     // about the tuning database; never fails the call
};

TuningOutcome tune(TuningTarget& target, const TuningPolicy& policy, TuningMemory& memory,
                   const SecondsClock& clock = steady_seconds);

// "hit", "miss, searched", ... for log lines.
const char* tiling_source_name(qjit_tiling_source source);

}  // namespace qjit
