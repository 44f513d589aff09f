// The forward's ops (qjit/qjit_ops.h) per instruction-set family this CPU runs, each under a
// context capped to it, beside the same run's fp32 multiply-add peak of the family's widest loop
// (tools/probe_loops.hpp) and the portable family (the reference twin every family is tested
// against). Attention: a prompt of P positions from an empty cache (causal) and one decode step
// after P positions, for SmolLM2-135M's heads (64 x 9, 3 key/value heads) and Llama-2-7B's (128 x
// 32, 32) and Llama-3-8B's (128 x 32, 8), the step also with the cache flushed from the CPU's
// caches first (as a decoding model finds it), in each family untimed and in the plan a context timing
// under the widest cap chooses (qjit_attention_tune; "tuned" rows). Row ops: RMSNorm, RoPE and SwiGLU over a 512-token
// prompt's rows of a 4096-wide model, and the argmax of one row of 49152 logits (beside its
// reference, a loop one value at a time). Medians of --repeats calls after a warm-up; Markdown
// out; --heads none leaves attention out.
//
// Usage: bench_ops [--threads 1,2] [--positions 512] [--repeats 9]
//                  [--heads SmolLM2-135M,Llama-2-7B,Llama-3-8B] [--caches f32,f16,int8]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.hpp"
#include "qjit/qjit.h"
#include "qjit/qjit_ops.h"
#include "tools/peak_probe.hpp"
#include "tools/probe_loops.hpp"

namespace {

using qjit_bench::median;

struct Options {
    std::vector<int> threads{1, 2};
    int positions = 512;
    int repeats = 9;
    std::string heads = "SmolLM2-135M,Llama-2-7B,Llama-3-8B";  // the attention tables' models
    std::string caches = "f32,f16,int8";
};

// Whether `name` is one of the comma-separated `list`.
bool listed(const std::string& list, const std::string& name) {
    return ("," + list + ",").find("," + name + ",") != std::string::npos;
}

struct Family {
    const char* name;
    qjit_isa cap;
    qjit_tools::DotLoop fma_loop;     // the probe loop of the same width
    std::map<int, double> peak_flops;  // by thread count, measured once
};

// A context under `cap`; budget 0: attention runs the cap's family untimed (the model's pick).
qjit_context* capped_context(qjit_isa cap, int threads, double tuning_budget_ms = 0) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = threads;
    options.max_isa = cap;
    options.tuning_db_path = "";
    options.tuning_budget_ms = tuning_budget_ms;
    qjit_context* context = nullptr;
    if (qjit_context_create(&options, &context) != QJIT_OK) {
        std::fprintf(stderr, "bench_ops: %s\n", qjit_last_error());
        std::exit(1);
    }
    return context;
}

// The families this CPU runs (the context's own ISA tells: a cap above the CPU is lowered), each
// with its FMA peak on every thread count, measured once for the whole run.
std::vector<Family> families(const std::vector<int>& threads) {
    std::vector<Family> all;
    for (const qjit_tools::DotLoop& loop : qjit_tools::supported_fma_loops()) {
        const bool zmm = std::strstr(loop.name, "zmm") != nullptr, ymm = std::strstr(loop.name, "ymm") != nullptr;
        Family f{zmm ? "avx512" : ymm ? "avx2" : "portable", zmm ? QJIT_ISA_AVX512 : ymm ? QJIT_ISA_AVX2 : QJIT_ISA_PORTABLE,
                 loop, {}};
        qjit_context* context = capped_context(f.cap, 1);
        qjit_isa isa = QJIT_ISA_PORTABLE;
        qjit_context_isa(context, &isa);
        qjit_context_destroy(context);
        if (isa < f.cap) continue;
        for (int t : threads) f.peak_flops[t] = 2.0 * qjit_tools::PeakProbe(loop).peak(t);
        all.push_back(f);
    }
    return all;  // widest first
}

// Median seconds of `repeats` calls after one warm-up, `prepare` untimed before each.
double time_median(int repeats, const std::function<void()>& call, const std::function<void()>& prepare = [] {}) {
    call();
    std::vector<double> seconds;
    for (int i = 0; i < repeats; ++i) {
        prepare();
        const auto start = std::chrono::steady_clock::now();
        call();
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return median(seconds);
}

void check(qjit_status status, const char* call) {
    if (status != QJIT_OK) {
        std::fprintf(stderr, "bench_ops: %s: %s\n", call, qjit_last_error());
        std::exit(1);
    }
}

// Reads 256 MiB a line at a time: what the caches held before is gone (a decoding model's layer
// finds its KV cache so, every other layer's weights and cache having passed since).
void flush_caches() {
    static std::vector<unsigned char> lines(size_t(256) << 20, 1);
    unsigned sum = 0;
    for (size_t i = 0; i < lines.size(); i += 64) sum += lines[i];
    if (sum == 0) std::fprintf(stderr, "bench_ops: the flush buffer reads as zeros\n");  // keeps the reads
}

struct Heads {
    const char* model;
    qjit_attention_shape shape;
};

// A cache of `positions` + 1 random keys and values and as many queries, stored in each cache type.
struct AttentionData {
    static constexpr qjit_kv_type kTypes[] = {QJIT_KV_F32, QJIT_KV_F16, QJIT_KV_INT8};
    qjit_attention_shape shape;
    int64_t capacity;
    std::vector<float> q, out;
    std::vector<std::byte> keys[3], values[3];  // per kTypes
    AttentionData(qjit_attention_shape s, int positions) : shape(s) {
        capacity = (positions + 1 + QJIT_ATTENTION_KEY_BLOCK - 1) / QJIT_ATTENTION_KEY_BLOCK * QJIT_ATTENTION_KEY_BLOCK;
        const size_t kv_dim = size_t(s.n_kv_heads * s.head_size), q_dim = size_t(s.n_heads * s.head_size);
        std::mt19937 rng(1);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> k(kv_dim * size_t(capacity)), v(k.size());
        q.resize(q_dim * size_t(positions + 1));
        out.resize(q.size());
        for (auto* rows : {&k, &v, &q})
            for (float& x : *rows) x = normal(rng);
        for (size_t i = 0; i < std::size(kTypes); ++i) {
            keys[i].assign(qjit_kv_cache_bytes(&shape, capacity, kTypes[i]), std::byte{0});
            values[i].assign(keys[i].size(), std::byte{0});
            const qjit_kv_cache cache = view(kTypes[i]);
            check(qjit_kv_cache_store(&shape, &cache, k.data(), v.data(), 0, int(capacity)), "qjit_kv_cache_store");
        }
    }
    qjit_kv_cache view(qjit_kv_type type) {
        const size_t i = size_t(std::find(std::begin(kTypes), std::end(kTypes), type) - std::begin(kTypes));
        return {keys[i].data(), values[i].data(), capacity, type};
    }
    void run(qjit_context* context, qjit_kv_type type, int pos0, int count) {
        const qjit_kv_cache cache = view(type);
        check(qjit_attention_causal(context, &shape, &cache, q.data(), pos0, count, out.data()), "qjit_attention_causal");
    }
};

// Multiply-adds x 2 of causal attention for queries at positions pos0 .. pos0 + count - 1: each
// attends to pos + 1 positions, twice (scores, then the weighted values) per query head.
double attention_flops(const qjit_attention_shape& s, int pos0, int count) {
    double positions = 0;
    for (int t = pos0; t < pos0 + count; ++t) positions += t + 1;
    return 2.0 * 2.0 * double(s.head_size) * double(s.n_heads) * positions;
}

// The FMA peak of the family a kernel name says it runs ("attention_avx2_r4": AVX2's).
double families_peak(const std::vector<Family>& families, const char* kernel, int threads) {
    for (const Family& f : families)
        if (std::strstr(kernel, (std::string("_") + f.name + "_").c_str())) return f.peak_flops.at(threads);
    return families.back().peak_flops.at(threads);
}

void attention_table(const Options& options, const std::vector<Family>& families) {
    const Heads heads[] = {{"SmolLM2-135M", {64, 9, 3}}, {"Llama-2-7B", {128, 32, 32}}, {"Llama-3-8B", {128, 32, 8}}};
    std::printf("\n## Attention, %d positions\n\n", options.positions);
    std::printf("| heads | test | cache | threads | family | kernel | ms | GFLOP/s | of the FMA peak | x portable |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Heads& h : heads) {
        if (!listed(options.heads, h.model)) continue;
        AttentionData data(h.shape, options.positions);
        for (const qjit_kv_type type : AttentionData::kTypes)
            for (int threads : options.threads) {
                const char* cache = type == QJIT_KV_F16 ? "f16" : type == QJIT_KV_INT8 ? "int8" : "f32";
                if (!listed(options.caches, cache)) continue;
                double portable_prompt = 0, portable_decode = 0, portable_cold = 0;
                // Each family's kernels untimed (portable first), then the plan a timed context
                // chooses under the widest cap.
                for (size_t i = 0; i <= families.size(); ++i) {
                    const bool tuned = i == families.size();
                    const Family& f = tuned ? families.front() : families[families.size() - 1 - i];
                    qjit_context* context = capped_context(f.cap, threads, tuned ? 300 : 0);
                    const char* kernel = nullptr;
                    check(qjit_attention_tune(context, &h.shape, type, &kernel), "qjit_attention_tune");
                    const char* family = tuned ? "tuned" : f.name;
                    const double peak = families_peak(families, kernel, threads);
                    const double prompt =
                        time_median(options.repeats, [&] { data.run(context, type, 0, options.positions); });
                    const double decode =
                        time_median(options.repeats * 10, [&] { data.run(context, type, options.positions, 1); });
                    const double cold = time_median(
                        options.repeats, [&] { data.run(context, type, options.positions, 1); }, flush_caches);
                    if (f.cap == QJIT_ISA_PORTABLE) portable_prompt = prompt, portable_decode = decode, portable_cold = cold;
                    const double prompt_rate = attention_flops(h.shape, 0, options.positions) / prompt;
                    const double decode_rate = attention_flops(h.shape, options.positions, 1) / decode;
                    std::printf("| %s %dx%d/%d | prompt | %s | %d | %s | %s | %.2f | %.1f | %.2f | %.1f |\n", h.model,
                                h.shape.head_size, h.shape.n_heads, h.shape.n_kv_heads, cache, threads, family,
                                kernel, prompt * 1e3, prompt_rate / 1e9, prompt_rate / peak, portable_prompt / prompt);
                    std::printf("| %s %dx%d/%d | decode | %s | %d | %s | %s | %.3f | %.1f | %.2f | %.1f |\n", h.model,
                                h.shape.head_size, h.shape.n_heads, h.shape.n_kv_heads, cache, threads, family,
                                kernel, decode * 1e3, decode_rate / 1e9, decode_rate / peak, portable_decode / decode);
                    const double cold_rate = attention_flops(h.shape, options.positions, 1) / cold;
                    std::printf("| %s %dx%d/%d | decode, cold | %s | %d | %s | %s | %.3f | %.1f | %.2f | %.1f |\n", h.model,
                                h.shape.head_size, h.shape.n_heads, h.shape.n_kv_heads, cache, threads, family,
                                kernel, cold * 1e3, cold_rate / 1e9, cold_rate / peak, portable_cold / cold);
                    std::fflush(stdout);
                    qjit_context_destroy(context);
                }
            }
    }
}

void row_ops_table(const Options& options, const std::vector<Family>& families) {
    const int rows = options.positions, dim = 4096, head_size = 128, hidden = 11008;
    std::vector<float> x(size_t(rows) * dim, 0.5f), weight(dim, 1.1f), out(x.size());
    std::vector<float> rotations(size_t(rows) * head_size, 0.7f), gate(size_t(rows) * hidden, 0.3f),
        up(gate.size(), 0.2f);
    // One row of logits over SmolLM2's vocabulary, the classifier's output a greedy step reads.
    const int64_t vocab = 49152;
    std::vector<float> logits(static_cast<size_t>(vocab));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& logit : logits) logit = normal(rng);
    int64_t token = 0;
    std::printf("\n## Row ops, %d rows\n\n", rows);
    std::printf("| op | threads | family | kernel | us | x portable |\n|---|---|---|---|---|---|\n");
    struct RowOp {
        const char* name;
        qjit_op op;
        std::function<void(qjit_context*)> run;
    };
    const RowOp ops[] = {
        {"RMSNorm 4096", QJIT_OP_RMS_NORM,
         [&](qjit_context* c) { check(qjit_rms_norm(c, x.data(), weight.data(), rows, dim, 1e-5f, out.data()), "rms_norm"); }},
        {"RoPE 4096 (heads of 128)", QJIT_OP_ROPE,
         [&](qjit_context* c) {
             check(qjit_rope(c, x.data(), rows, dim, head_size, rotations.data(), QJIT_ROPE_ADJACENT), "rope");
         }},
        {"SwiGLU 11008", QJIT_OP_SWIGLU,
         [&](qjit_context* c) { check(qjit_swiglu(c, up.data(), gate.data(), int64_t(rows) * hidden), "swiglu"); }},
        {"argmax 49152 (one row)", QJIT_OP_ARGMAX,
         [&](qjit_context* c) { check(qjit_argmax(c, logits.data(), 1, vocab, &token), "argmax"); }}};
    for (const RowOp& op : ops)
        for (int threads : options.threads) {
            double portable = 0;
            for (auto f = families.rbegin(); f != families.rend(); ++f) {
                qjit_context* context = capped_context(f->cap, threads);
                const char* kernel = nullptr;
                qjit_op_kernel_name(context, op.op, &kernel);
                const double seconds = time_median(options.repeats, [&] { op.run(context); });
                if (f->cap == QJIT_ISA_PORTABLE) portable = seconds;
                std::printf("| %s | %d | %s | %s | %.1f | %.2f |\n", op.name, threads, f->name, kernel, seconds * 1e6,
                            portable / seconds);
                std::fflush(stdout);
                qjit_context_destroy(context);
            }
        }
    // The argmax's reference: one value at a time, as the tests check the kernels against.
    const double scalar = time_median(options.repeats, [&] {
        int64_t best = 0;
        for (int64_t i = 1; i < vocab; ++i)
            if (logits[size_t(i)] > logits[size_t(best)]) best = i;
        token = best;
    });
    std::printf("| argmax 49152 (one row) | 1 | - | one value at a time | %.1f | - |\n", scalar * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--threads") options.threads = qjit_bench::parse_list<int>("bench_ops", argv[i + 1]);
        else if (flag == "--positions") options.positions = std::max(1, std::atoi(argv[i + 1]));
        else if (flag == "--repeats") options.repeats = std::max(1, std::atoi(argv[i + 1]));
        else if (flag == "--heads") options.heads = argv[i + 1];
        else if (flag == "--caches") options.caches = argv[i + 1];
        else {
            std::fprintf(stderr, "usage: bench_ops [--threads 1,2] [--positions 512] [--repeats 9] [--heads "
                                 "SmolLM2-135M,Llama-2-7B,Llama-3-8B] [--caches f32,f16,int8]\n");
            return 2;
        }
    }
    const char* description = nullptr;
    qjit_context* context = capped_context(QJIT_ISA_AUTO, 1);
    qjit_context_describe(context, &description);
    std::printf("# bench_ops\n\n%s\n", description);
    qjit_context_destroy(context);
    const std::vector<Family> all = families(options.threads);
    std::printf("\nFMA peak per family (GFLOP/s, best of %d runs):", qjit_tools::PeakProbe::kPeakRuns);
    for (const Family& f : all)
        for (const auto& [threads, flops] : f.peak_flops)
            std::printf(" %s %d thread(s) %.1f (%s);", f.name, threads, flops / 1e9, f.fma_loop.name);
    std::printf("\n");
    attention_table(options, all);
    row_ops_table(options, all);
    return 0;
}
