#include "tuner/tuning_sequence.hpp"

#include <limits>
#include <optional>
#include <stdexcept>

#include "base/error.hpp"

namespace qjit {

namespace {

// The record's tiling in canonical text, or nothing (with a warning) when the target cannot use it.
std::optional<std::string> usable(TuningTarget& target, const TuningRecord& record, std::string& warning) {
    try {
        return target.accept(record.tiling);
    } catch (const std::exception& e) {
        warning = concat("tuning database record for '", record.kernel_key, "' ignored: ", e.what());
        return std::nullopt;
    }
}

// Times the ranked candidates within what is left of the budget, remembers and stores the winner
// (a failed store replaces the outcome's warning) and returns its tiling.
std::string searched(TuningTarget& target, const TuningPolicy& policy, TuningMemory& memory, TuningDb* db,
                     const std::vector<RankedTiling>& ranked, double spent_seconds, const SecondsClock& clock,
                     TuningOutcome& outcome) {
    const bool exhaustive = policy.mode == QJIT_TUNING_EXHAUSTIVE;
    std::vector<std::string> structures;
    for (const RankedTiling& candidate : ranked) structures.push_back(candidate.structure);
    const double budget = exhaustive ? std::numeric_limits<double>::infinity() : policy.budget_ms * 1e-3 - spent_seconds;
    const SearchResult result = timed_search(
        structures, [&](size_t i) { return target.timed_call(ranked[i]); }, budget, clock);
    outcome.timed = result.timed;
    outcome.measured_us = result.measured.median_seconds * 1e6;

    TuningRecord record;
    record.fingerprint = target.fingerprint();
    record.kernel_key = outcome.kernel_key;
    record.tiling = ranked[result.best].text;
    record.time_us = outcome.measured_us;
    record.gbps = target.weight_bytes(record.tiling) / result.measured.median_seconds * 1e-9;
    record.date = utc_timestamp();
    memory.tuned[record.kernel_key] = record;
    try {
        if (db) db->store(record);
    } catch (const Error& e) {
        outcome.warning = concat("tuning result not stored: ", e.what());
    }
    return record.tiling;
}

}  // namespace

TuningDb* TuningMemory::database() {
    if (!db && !db_path.empty()) db = std::make_unique<TuningDb>(db_path);
    return db.get();
}

const char* tiling_source_name(qjit_tiling_source source) {
    switch (source) {
        case QJIT_TILING_PORTABLE: return "portable";
        case QJIT_TILING_FORCED: return "forced";
        case QJIT_TILING_DATABASE: return "database hit";
        case QJIT_TILING_CONTEXT: return "context hit";
        case QJIT_TILING_SEARCHED: return "database miss, searched";
        case QJIT_TILING_MODEL: return "database miss, model pick (budget 0)";
        case QJIT_TILING_PACK: return "pack file";
        default: return "unknown";
    }
}

TuningOutcome tune(TuningTarget& target, const TuningPolicy& policy, TuningMemory& memory, const SecondsClock& clock) {
    const double start = clock();
    TuningOutcome outcome;
    outcome.kernel_key = target.kernel_key();
    auto finish = [&](std::string tiling, qjit_tiling_source source) {
        outcome.tiling = std::move(tiling);
        outcome.source = source;
        outcome.tuning_ms = (clock() - start) * 1e3;
        return outcome;
    };
    if (!policy.forced.empty()) return finish(target.complete_forced(policy.forced), QJIT_TILING_FORCED);

    std::lock_guard lock(memory.mutex);
    // A context shares one choice per key between its layers, in every mode: a retuned or
    // exhaustive choice made for the first layer of a shape serves the others.
    if (auto it = memory.tuned.find(outcome.kernel_key); it != memory.tuned.end())
        if (std::optional<std::string> tiling = usable(target, it->second, outcome.warning)) {
            outcome.measured_us = it->second.time_us;
            return finish(*tiling, QJIT_TILING_CONTEXT);
        }
    TuningDb* db = nullptr;
    try {
        const bool opens_now = !memory.db;
        db = memory.database();
        if (db && opens_now) outcome.warning = db->warning();  // reported by the layer that read the file
    } catch (const Error& e) {
        outcome.warning = concat("tuning database not used: ", e.what());
        memory.db_path.clear();  // do not try again for every layer
    }
    if (db && policy.mode == QJIT_TUNING_DEFAULT)
        if (std::optional<TuningRecord> record = db->find(target.fingerprint(), outcome.kernel_key))
            if (std::optional<std::string> tiling = usable(target, *record, outcome.warning)) {
                outcome.measured_us = record->time_us;
                memory.tuned[outcome.kernel_key] = *record;
                return finish(*tiling, QJIT_TILING_DATABASE);
            }

    const bool exhaustive = policy.mode == QJIT_TUNING_EXHAUSTIVE;
    const std::vector<RankedTiling> ranked = target.rank(!exhaustive);
    outcome.ranked = int(ranked.size());
    if (!policy.may_search || (policy.budget_ms == 0 && policy.mode == QJIT_TUNING_DEFAULT))
        return finish(ranked.front().text, QJIT_TILING_MODEL);
    return finish(searched(target, policy, memory, db, ranked, clock() - start, clock, outcome), QJIT_TILING_SEARCHED);
}

}  // namespace qjit
