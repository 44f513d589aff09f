#include "tuner/timed_search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

namespace qjit {

namespace {

Measurement summarize(std::vector<double> samples) {
    std::sort(samples.begin(), samples.end());
    const size_t n = samples.size();
    Measurement m;
    m.samples = int(n);
    m.median_seconds = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
    const double q1 = samples[n / 4], q3 = samples[3 * n / 4];
    m.spread = m.median_seconds > 0 ? (q3 - q1) / m.median_seconds : 0.0;
    m.stable = m.spread <= kUnstableSpread;
    return m;
}

// Calls warmed up already, timed in interleaved rounds, one call of each per round: `repeats`
// rounds, then, while a call's spread is above kUnstableSpread, `repeats` more rounds of the
// unstable ones, kMaxRounds times `repeats` samples at most.
std::vector<Measurement> measure_interleaved(const std::vector<const TimedCall*>& calls, int repeats) {
    std::vector<std::vector<double>> samples(calls.size());
    std::vector<Measurement> measured(calls.size());
    std::vector<size_t> timing(calls.size());
    for (size_t c = 0; c < calls.size(); ++c) timing[c] = c;
    for (int round = 0; round < kMaxRounds * repeats && !timing.empty(); ++round) {
        for (size_t c : timing) samples[c].push_back((*calls[c])());
        if ((round + 1) % repeats != 0) continue;
        std::erase_if(timing, [&](size_t c) {
            measured[c] = summarize(samples[c]);
            return measured[c].stable;
        });
    }
    return measured;
}

// A screened candidate: its call, kept for the confirmation, and its screening's measurement.
struct Screened {
    size_t index;
    TimedCall call;
    Measurement measured;
};

// The screening's state across its phases: what was timed so far, the fastest screened and each
// structure's best.
class Screening {
public:
    Screening(const std::vector<std::string>& structures, const MakeTimedCall& make_call, const SecondsClock& clock)
        : structures_(structures), make_call_(make_call), clock_(clock), start_(clock()),
          screened_(structures.size(), false) {}

    double elapsed() const { return clock_() - start_; }
    int timed() const { return timed_; }
    std::vector<Screened>& finalists() { return finalists_; }
    const std::map<std::string, double>& structure_best() const { return structure_best_; }

    // Screens the candidates of `order` until `until_seconds` have passed since the start (always
    // at least one candidate in all). Each is made and warmed up first, as many as the forecast
    // allows; then all of them are timed in interleaved rounds, one call of each per round, so
    // that a machine that slows down for a while (a neighbour's burst on a shared host, a
    // frequency change) slows every candidate alike instead of the one timed at that moment.
    void screen(const std::vector<size_t>& order, double until_seconds) {
        std::vector<Screened> batch;
        double pending = 0;  // forecast seconds of the batch's timed rounds
        for (size_t i : order) {
            if (screened_[i]) continue;
            const double forecast = slowest_make_ + (1 + kScreenRepeats) * slowest_call_;
            if (timed_ + int(batch.size()) > 0 && elapsed() + pending + forecast > until_seconds) break;
            const double make_start = clock_();
            TimedCall call = make_call_(i);
            const double warm_start = clock_();
            call();  // warm-up: first-touch buffers, instruction cache
            const double call_seconds = clock_() - warm_start;
            slowest_make_ = std::max(slowest_make_, warm_start - make_start);
            slowest_call_ = std::max(slowest_call_, call_seconds);
            pending += kScreenRepeats * call_seconds;
            screened_[i] = true;
            batch.push_back({i, std::move(call), {}});
        }
        std::vector<const TimedCall*> calls;
        for (const Screened& candidate : batch) calls.push_back(&candidate.call);
        const std::vector<Measurement> measured = measure_interleaved(calls, kScreenRepeats);
        for (size_t b = 0; b < batch.size(); ++b) batch[b].measured = measured[b];
        for (Screened& candidate : batch) {
            ++timed_;
            auto [best, inserted] = structure_best_.try_emplace(structures_[candidate.index], candidate.measured.median_seconds);
            if (!inserted) best->second = std::min(best->second, candidate.measured.median_seconds);
            keep_if_fast(std::move(candidate));
        }
    }

private:
    // The kFinalists fastest screened, at most half of them of one structure while others can
    // fill the places: variants of one structure screened at one moment must not crowd out a
    // rival structure that the confirmation would time beside them.
    void keep_if_fast(Screened candidate) {
        const auto faster = [](const Screened& a, const Screened& b) {
            return a.measured.median_seconds < b.measured.median_seconds;
        };
        finalists_.push_back(std::move(candidate));
        std::stable_sort(finalists_.begin(), finalists_.end(), faster);
        std::map<std::string, int> per_structure;
        std::vector<Screened> kept, crowded;
        for (Screened& f : finalists_)
            (++per_structure[structures_[f.index]] > kFinalists / 2 ? crowded : kept).push_back(std::move(f));
        for (Screened& f : crowded) kept.push_back(std::move(f));  // after every uncrowded one
        if (kept.size() > size_t(kFinalists)) kept.resize(size_t(kFinalists));
        std::stable_sort(kept.begin(), kept.end(), faster);
        finalists_ = std::move(kept);
    }

    const std::vector<std::string>& structures_;
    const MakeTimedCall& make_call_;
    const SecondsClock& clock_;
    const double start_;
    std::vector<Screened> finalists_;                // the fastest screened so far, at most kFinalists
    std::map<std::string, double> structure_best_;  // fastest median screened per structure
    std::vector<bool> screened_;
    int timed_ = 0;
    double slowest_make_ = 0;  // seconds the slowest candidate took to make: the forecasts'
    double slowest_call_ = 0;  // and one call of the slowest
};

// The model's best candidate of each structure, in model order.
std::vector<size_t> representatives(const std::vector<std::string>& structures) {
    std::vector<size_t> firsts;
    std::set<std::string> seen;
    for (size_t i = 0; i < structures.size(); ++i)
        if (seen.insert(structures[i]).second) firsts.push_back(i);
    return firsts;
}

// Every candidate of the screened structures, fastest structure first, each in model order.
std::vector<size_t> variants_of_fastest(const std::vector<std::string>& structures,
                                        const std::map<std::string, double>& structure_best) {
    std::vector<std::pair<double, std::string>> fastest;
    for (const auto& [structure, seconds] : structure_best) fastest.push_back({seconds, structure});
    std::sort(fastest.begin(), fastest.end());
    std::vector<size_t> variants;
    for (const auto& structure : fastest)
        for (size_t i = 0; i < structures.size(); ++i)
            if (structures[i] == structure.second) variants.push_back(i);
    return variants;
}

// Re-times the finalists, interleaved (one call of each per round) while the budget lasts, and
// returns the index into `finalists` of the fastest median.
size_t confirm(std::vector<Screened>& finalists, const Screening& screening, double budget_seconds,
               const SecondsClock& clock) {
    std::vector<std::vector<double>> samples(finalists.size());
    if (finalists.size() > 1) {
        for (Screened& f : finalists) f.call();  // warm again after the others ran
        double round_seconds = 0;  // the last round's time: the forecast for the next
        for (int round = 0; round < kConfirmRepeats; ++round) {
            if (round > 0 && screening.elapsed() + round_seconds > budget_seconds) break;
            const double round_start = clock();
            for (size_t f = 0; f < finalists.size(); ++f) samples[f].push_back(finalists[f].call());
            round_seconds = clock() - round_start;
        }
    }
    size_t winner = 0;
    for (size_t f = 0; f < finalists.size(); ++f) {
        if (!samples[f].empty()) finalists[f].measured = summarize(samples[f]);
        if (finalists[f].measured.median_seconds < finalists[winner].measured.median_seconds) winner = f;
    }
    return winner;
}

}  // namespace

double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TimedCall timed_on_host(CandidateRun candidate) {
    return [candidate = std::move(candidate)] {
        if (candidate.prepare) candidate.prepare();
        const double start = steady_seconds();
        candidate.run();
        return steady_seconds() - start;
    };
}

Measurement measure(const TimedCall& call, int repeats) {
    call();  // warm-up: first-touch buffers, instruction cache
    return measure_interleaved({&call}, repeats).front();
}

SearchResult timed_search(const std::vector<std::string>& structures, const MakeTimedCall& make_call,
                          double budget_seconds, const SecondsClock& clock) {
    Screening screening(structures, make_call, clock);
    if (std::isinf(budget_seconds)) {  // exhaustive
        std::vector<size_t> all(structures.size());
        for (size_t i = 0; i < all.size(); ++i) all[i] = i;
        screening.screen(all, budget_seconds);
    } else {
        screening.screen(representatives(structures), kStructureShare * budget_seconds);
        screening.screen(variants_of_fastest(structures, screening.structure_best()), kScreeningShare * budget_seconds);
    }
    std::vector<Screened>& finalists = screening.finalists();
    const size_t winner = confirm(finalists, screening, budget_seconds, clock);
    SearchResult result;
    result.considered = int(structures.size());
    result.timed = screening.timed();
    result.best = finalists[winner].index;
    result.measured = finalists[winner].measured;
    result.seconds = screening.elapsed();
    return result;
}

}  // namespace qjit
