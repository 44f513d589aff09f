#include "tuner/timed_search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

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
    const double q1 = samples[n / 4], q3 = samples[3 * n / 4];
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
    const bool exhaustive = std::isinf(budget_seconds);

    struct Screened {
        size_t index;
        CandidateRun run;
        Measurement measured;
    };
    std::vector<Screened> finalists;  // the fastest screened so far, at most kFinalists
    std::map<std::pair<int, int>, double> block_best;  // (tu, mb) -> fastest median screened
    std::vector<bool> screened(ranked.size(), false);
    double slowest_screen = 0;  // seconds one screening took: the forecast for the next
    auto register_block = [&](size_t i) {
        return std::make_pair(ranked[i].spec.tiling.column_vectors, ranked[i].spec.tiling.rows);
    };
    // Screens the candidates of `order` until `until_seconds` have passed since the start (always
    // at least one candidate in all).
    auto screen = [&](const std::vector<size_t>& order, double until_seconds) {
        for (size_t i : order) {
            if (screened[i]) continue;
            if (result.timed > 0 && elapsed_since(start) + slowest_screen > until_seconds) break;
            const auto screen_start = Clock::now();
            CandidateRun run = make_run(ranked[i].spec);
            const Measurement m = measure(run, kScreenRepeats);
            slowest_screen = std::max(slowest_screen, elapsed_since(screen_start));
            screened[i] = true;
            ++result.timed;
            auto [block, inserted] = block_best.try_emplace(register_block(i), m.median_seconds);
            if (!inserted) block->second = std::min(block->second, m.median_seconds);
            finalists.push_back({i, std::move(run), m});
            std::sort(finalists.begin(), finalists.end(), [](const Screened& a, const Screened& b) {
                return a.measured.median_seconds < b.measured.median_seconds;
            });
            if (finalists.size() > size_t(kFinalists)) finalists.resize(size_t(kFinalists));
        }
    };

    std::vector<size_t> all(ranked.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    if (exhaustive) {
        screen(all, budget_seconds);
    } else {
        // Structure first: the model's best variant of each register block, in model order.
        std::vector<size_t> representatives;
        std::set<std::pair<int, int>> seen;
        for (size_t i : all)
            if (seen.insert(register_block(i)).second) representatives.push_back(i);
        screen(representatives, kStructureShare * budget_seconds);
        // Then the other knobs (prefetch, k-unroll, K-split) of the fastest register blocks.
        std::vector<std::pair<double, std::pair<int, int>>> blocks;
        for (const auto& [block, seconds] : block_best) blocks.push_back({seconds, block});
        std::sort(blocks.begin(), blocks.end());
        if (blocks.size() > size_t(kRefinedBlocks)) blocks.resize(size_t(kRefinedBlocks));
        std::vector<size_t> variants;
        for (size_t i : all)
            for (const auto& block : blocks)
                if (register_block(i) == block.second) variants.push_back(i);
        screen(variants, kScreeningShare * budget_seconds);
    }

    // Confirmation, interleaved: one call of each finalist per round.
    std::vector<std::vector<double>> samples(finalists.size());
    if (finalists.size() > 1) {
        for (Screened& f : finalists) timed_call(f.run);  // warm again after the others ran
        double round_seconds = 0;  // the last round's wall time: the forecast for the next
        for (int round = 0; round < kConfirmRepeats; ++round) {
            if (round > 0 && elapsed_since(start) + round_seconds > budget_seconds) break;
            const auto round_start = Clock::now();
            for (size_t f = 0; f < finalists.size(); ++f) samples[f].push_back(timed_call(finalists[f].run));
            round_seconds = elapsed_since(round_start);
        }
    }
    size_t winner = 0;
    for (size_t f = 0; f < finalists.size(); ++f) {
        if (!samples[f].empty()) finalists[f].measured = summarize(samples[f]);
        if (finalists[f].measured.median_seconds < finalists[winner].measured.median_seconds) winner = f;
    }
    result.best = ranked[finalists[winner].index];
    result.measured = finalists[winner].measured;
    result.seconds = elapsed_since(start);
    return result;
}

}  // namespace qjit
