#include "tuner/timed_search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace qjit {

namespace {

using Clock = std::chrono::steady_clock;

double elapsed_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double timed_call(const CandidateRun& candidate) {
    if (candidate.prepare) candidate.prepare();
    const auto start = Clock::now();
    candidate.run();
    return elapsed_since(start);
}

Measurement summarize(std::vector<double> samples) {
    std::sort(samples.begin(), samples.end());
    const size_t n = samples.size();
    Measurement m;
    m.samples = int(n);
    m.median_seconds = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
    const double q1 = samples[n / 4], q3 = samples[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1];
    m.spread = m.median_seconds > 0 ? (q3 - q1) / m.median_seconds : 0.0;
    m.stable = m.spread <= kUnstableSpread;
    return m;
}

}  // namespace

Measurement measure(const CandidateRun& candidate, int repeats) {
    timed_call(candidate);  // warm-up: first-touch buffers, instruction cache
    std::vector<double> samples;
    Measurement m;
    for (int round = 0; round < kMaxRounds; ++round) {
        for (int i = 0; i < repeats; ++i) samples.push_back(timed_call(candidate));
        m = summarize(samples);
        if (m.stable) break;
    }
    return m;
}

SearchResult timed_search(const std::vector<Candidate>& ranked, const MakeRun& make_run, double budget_seconds) {
    const auto start = Clock::now();
    SearchResult result;
    result.considered = int(ranked.size());
    const double screening_budget = 0.7 * budget_seconds;

    struct Screened {
        size_t index;
        CandidateRun run;
        Measurement measured;
    };
    std::vector<Screened> screened;
    double slowest_screen = 0;  // seconds one screening took: the forecast for the next
    for (size_t i = 0; i < ranked.size(); ++i) {
        if (!screened.empty() && elapsed_since(start) + slowest_screen > screening_budget) break;
        const auto screen_start = Clock::now();
        CandidateRun run = make_run(ranked[i].spec);
        const Measurement m = measure(run, kScreenRepeats);
        slowest_screen = std::max(slowest_screen, elapsed_since(screen_start));
        screened.push_back({i, std::move(run), m});
        // Keep only the finalists' runs alive (they hold generated code and buffers).
        std::sort(screened.begin(), screened.end(), [](const Screened& a, const Screened& b) {
            return a.measured.median_seconds < b.measured.median_seconds;
        });
        if (screened.size() > size_t(kFinalists)) screened.resize(size_t(kFinalists));
        ++result.timed;
    }

    // Confirmation, interleaved: one call of each finalist per round.
    std::vector<std::vector<double>> samples(screened.size());
    if (screened.size() > 1) {
        for (Screened& s : screened) timed_call(s.run);  // warm again after the others ran
        for (int round = 0; round < kConfirmRepeats; ++round) {
            if (round >= 2 && elapsed_since(start) > budget_seconds) break;
            for (size_t f = 0; f < screened.size(); ++f) samples[f].push_back(timed_call(screened[f].run));
        }
    }
    size_t winner = 0;
    for (size_t f = 0; f < screened.size(); ++f) {
        if (!samples[f].empty()) screened[f].measured = summarize(samples[f]);
        if (screened[f].measured.median_seconds < screened[winner].measured.median_seconds) winner = f;
    }
    result.best = ranked[screened[winner].index];
    result.measured = screened[winner].measured;
    result.seconds = elapsed_since(start);
    return result;
}

}  // namespace qjit
