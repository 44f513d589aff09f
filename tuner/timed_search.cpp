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
    std::vector<double> samples;
    Measurement m;
    for (int round = 0; round < kMaxRounds; ++round) {
        for (int i = 0; i < repeats; ++i) samples.push_back(call());
        m = summarize(samples);
        if (m.stable) break;
    }
    return m;
}

SearchResult timed_search(const std::vector<std::string>& structures, const MakeTimedCall& make_call,
                          double budget_seconds, const SecondsClock& clock) {
    const double start = clock();
    auto elapsed = [&] { return clock() - start; };
    SearchResult result;
    result.considered = int(structures.size());
    const bool exhaustive = std::isinf(budget_seconds);

    struct Screened {
        size_t index;
        TimedCall call;
        Measurement measured;
    };
    std::vector<Screened> finalists;  // the fastest screened so far, at most kFinalists
    std::map<std::string, double> structure_best;  // fastest median screened per structure
    std::vector<bool> screened(structures.size(), false);
    double slowest_screen = 0;  // seconds one screening took: the forecast for the next
    // Screens the candidates of `order` until `until_seconds` have passed since the start (always
    // at least one candidate in all).
    auto screen = [&](const std::vector<size_t>& order, double until_seconds) {
        for (size_t i : order) {
            if (screened[i]) continue;
            if (result.timed > 0 && elapsed() + slowest_screen > until_seconds) break;
            const double screen_start = clock();
            TimedCall call = make_call(i);
            const Measurement m = measure(call, kScreenRepeats);
            slowest_screen = std::max(slowest_screen, clock() - screen_start);
            screened[i] = true;
            ++result.timed;
            auto [best, inserted] = structure_best.try_emplace(structures[i], m.median_seconds);
            if (!inserted) best->second = std::min(best->second, m.median_seconds);
            finalists.push_back({i, std::move(call), m});
            std::stable_sort(finalists.begin(), finalists.end(), [](const Screened& a, const Screened& b) {
                return a.measured.median_seconds < b.measured.median_seconds;
            });
            if (finalists.size() > size_t(kFinalists)) finalists.resize(size_t(kFinalists));
        }
    };

    std::vector<size_t> all(structures.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    if (exhaustive) {
        screen(all, budget_seconds);
    } else {
        // Structure first: the model's best candidate of each structure, in model order.
        std::vector<size_t> representatives;
        std::set<std::string> seen;
        for (size_t i : all)
            if (seen.insert(structures[i]).second) representatives.push_back(i);
        screen(representatives, kStructureShare * budget_seconds);
        // Then the other candidates of the screened structures, fastest structure first.
        std::vector<std::pair<double, std::string>> fastest;
        for (const auto& [structure, seconds] : structure_best) fastest.push_back({seconds, structure});
        std::sort(fastest.begin(), fastest.end());
        std::vector<size_t> variants;
        for (const auto& structure : fastest)
            for (size_t i : all)
                if (structures[i] == structure.second) variants.push_back(i);
        screen(variants, kScreeningShare * budget_seconds);
    }

    // Confirmation, interleaved: one call of each finalist per round.
    std::vector<std::vector<double>> samples(finalists.size());
    if (finalists.size() > 1) {
        for (Screened& f : finalists) f.call();  // warm again after the others ran
        double round_seconds = 0;  // the last round's time: the forecast for the next
        for (int round = 0; round < kConfirmRepeats; ++round) {
            if (round > 0 && elapsed() + round_seconds > budget_seconds) break;
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
    result.best = finalists[winner].index;
    result.measured = finalists[winner].measured;
    result.seconds = elapsed();
    return result;
}

}  // namespace qjit
