// How causal attention runs for one shape and cache type on a context: the instruction-set family
// of its kernels (at or below the context's cap) and the most queries of one key/value head a
// task takes. A context chooses once per shape and cache type, through the one tuning sequence
// (tuner/tuning_sequence.hpp) as layers choose their tilings: a remembered choice, the tuning
// database, the model's pick (the widest family, 4 rows) or a timed search within the budget,
// which times a decode step and a 4-query prompt chunk at 512 positions with each candidate, the
// cache flushed from the CPU's caches before each call (as a decoding model finds it).
// One family serves prompts and decode steps alike, so that a prompt and its tokens one by one
// still agree bit for bit; the rows do not change a query's bits (each row's arithmetic is its own).
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <string>

#include "base/simd_family.hpp"
#include "qjit/qjit_ops.h"

struct qjit_context;

namespace qjit::ops {

struct AttentionPlan {
    SimdFamily family = SimdFamily::Portable;
    int rows = 4;  // 1 .. max_attention_rows(family)
};

// "family=avx2,rows=4": the tuning database's text.
std::string plan_text(const AttentionPlan& plan);
// The plan of a text as plan_text writes it; throws an invalid-argument Error naming a bad knob.
AttentionPlan parse_plan(const std::string& text);
// "attention_avx2_r4": static storage.
const char* plan_kernel_name(const AttentionPlan& plan);

// The plans a context chose, by head size, query heads, key/value heads and cache type.
struct AttentionPlans {
    std::mutex mutex;
    std::map<std::array<int, 4>, AttentionPlan> chosen;
};

// The context's plan for `shape` over a cache of `type` (both checked by the caller), chosen on
// first use.
AttentionPlan attention_plan(qjit_context& context, const qjit_attention_shape& shape, qjit_kv_type type);

}  // namespace qjit::ops
