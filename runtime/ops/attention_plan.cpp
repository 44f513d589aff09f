#include "runtime/ops/attention_plan.hpp"

#include <memory>
#include <random>
#include <vector>

#include "base/error.hpp"
#include "jit/knob_text.hpp"
#include "runtime/context.hpp"
#include "runtime/cpu/cache_eviction.hpp"
#include "runtime/ops/attention_kernels.hpp"
#include "runtime/ops/causal_attention.hpp"
#include "tuner/cpu_isa.hpp"
#include "tuner/hardware_probe.hpp"

namespace qjit::ops {

namespace {

constexpr SimdFamily kFamilies[] = {SimdFamily::Portable, SimdFamily::Avx2, SimdFamily::Avx512};

const char* kv_type_name(qjit_kv_type type) {
    return type == QJIT_KV_F16 ? "f16" : type == QJIT_KV_INT8 ? "int8" : "f32";
}

// The work a candidate is timed on, over a cache of values drawn once and flushed from the CPU's
// caches before each call, as a decoding model finds a layer's cache (every other layer's weights
// and cache passed through since): a decode step at 512 positions, then the last 16 positions of a
// 512-position prompt, which take about as long as the step. (Timed hot, the decode step ranked
// the families otherwise than a model's forward does.) A cold step is bound by memory, and two
// families often run it at one speed; with 4 prompt positions, noise then chose between them
// (SmolLM2's heads got AVX-512, whose prompts ran a quarter slower on a Zen 4). With 16, the
// prompt decides such ties, and a family whose cold steps are clearly faster (AVX-512 on the
// Llama-2-7B heads: 15-40 %) still wins.
struct AttentionRig {
    static constexpr int kPrompt = 512, kChunk = 16;

    AttentionRig(const qjit_attention_shape& shape, qjit_kv_type type) : shape(shape) {
        const int64_t capacity = (kPrompt + 1 + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
        const size_t bytes = kv_cache_bytes(shape, capacity, type);
        keys.assign(bytes, std::byte{0});
        values.assign(bytes, std::byte{0});
        cache = {keys.data(), values.data(), capacity, type};
        const size_t kv_row = size_t(shape.n_kv_heads) * size_t(shape.head_size);
        const size_t q_row = size_t(shape.n_heads) * size_t(shape.head_size);
        std::mt19937 random(17);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> k((kPrompt + 1) * kv_row), v(k.size());
        for (float& x : k) x = normal(random);
        for (float& x : v) x = normal(random);
        store_keys_and_values(shape, cache, k.data(), v.data(), 0, kPrompt + 1);
        q.resize(kChunk * q_row);
        for (float& x : q) x = normal(random);
        out.resize(q.size());
    }

    void evict() const {
        evict_from_caches(keys);
        evict_from_caches(values);
    }

    void run(qjit_context& context, const AttentionPlan& plan) {
        causal_attention(context, plan, shape, cache, q.data(), kPrompt, 1, out.data());
        causal_attention(context, plan, shape, cache, q.data(), kPrompt - kChunk, kChunk, out.data());
    }

    qjit_attention_shape shape;
    qjit_kv_cache cache;
    std::vector<std::byte> keys, values;
    std::vector<float> q, out;
};

class AttentionTarget final : public TuningTarget {
public:
    AttentionTarget(qjit_context& context, const qjit_attention_shape& shape, qjit_kv_type type)
        : context_(context), shape_(shape), type_(type) {}

    // "attention_f32 head=64 heads=9/3 avx512_vnni threads=2": the shape, the cache and the cap.
    std::string kernel_key() const override {
        return concat("attention_", kv_type_name(type_), " head=", shape_.head_size, " heads=", shape_.n_heads, "/",
                      shape_.n_kv_heads, " ", isa_name(context_.isa), " threads=", context_.num_threads);
    }
    std::string fingerprint() const override { return probe_cpu().fingerprint; }

    // The widest family at 4 rows first (the model's pick), then the other families below the
    // cap (the portable one only where it is all there is), then 8 rows where a family has them.
    std::vector<RankedTiling> rank(bool) override {
        const SimdFamily widest = simd_family(context_.isa);
        std::vector<AttentionPlan> plans{{widest, 4}};
        for (int f = int(widest) - 1; f > int(SimdFamily::Portable); --f) plans.push_back({kFamilies[f], 4});
        if (max_attention_rows(widest) > 4) plans.push_back({widest, max_attention_rows(widest)});
        std::vector<RankedTiling> ranked;
        for (const AttentionPlan& plan : plans) ranked.push_back({plan_text(plan), plan_text(plan)});
        return ranked;
    }

    std::string accept(const std::string& text) override {
        const AttentionPlan plan = parse_plan(text);
        require(plan.family <= simd_family(context_.isa), "attention plan ", text, ": the ",
                simd_family_name(plan.family), " family is above this context's ISA, ", isa_name(context_.isa));
        return plan_text(plan);
    }
    std::string complete_forced(const std::string& text) override { return accept(text); }

    TimedCall timed_call(const RankedTiling& candidate) override {
        if (!rig_) rig_ = std::make_unique<AttentionRig>(shape_, type_);
        const AttentionPlan plan = parse_plan(candidate.text);
        return timed_on_host({[this] { rig_->evict(); }, [this, plan] { rig_->run(context_, plan); }});
    }

    double weight_bytes(const std::string&) override {
        return double(kv_cache_bytes(shape_, rig_ ? rig_->cache.capacity : 0, type_)) * 2;
    }

private:
    qjit_context& context_;
    qjit_attention_shape shape_;
    qjit_kv_type type_;
    std::unique_ptr<AttentionRig> rig_;
};

}  // namespace

std::string plan_text(const AttentionPlan& plan) {
    return concat("family=", simd_family_name(plan.family), ",rows=", plan.rows);
}

AttentionPlan parse_plan(const std::string& text) {
    constexpr const char* kWhat = "attention plan";
    AttentionPlan plan;
    bool family = false, rows = false;
    for (const jit::KnobItem& item : jit::knob_items(text, kWhat)) {
        if (item.name == "family") {
            bool known = false;
            for (SimdFamily f : kFamilies)
                if (item.value == simd_family_name(f)) plan.family = f, known = true;
            require(known, kWhat, " '", text, "': family ", item.value, " is not portable, avx2 or avx512");
            family = true;
        } else if (item.name == "rows") {
            plan.rows = jit::knob_integer(item, text, kWhat);
            require(plan.rows >= 1 && plan.rows <= kMaxAttentionRows, kWhat, " '", text, "': rows ", plan.rows,
                    " is not 1 to ", kMaxAttentionRows);
            rows = true;
        } else {
            jit::refuse_unknown_knob(item, text, kWhat, {"family", "rows"});
        }
    }
    require(family && rows, kWhat, " '", text, "': expected family=...,rows=...");
    require(plan.rows <= max_attention_rows(plan.family), kWhat, " '", text, "': the ",
            simd_family_name(plan.family), " family takes at most ", max_attention_rows(plan.family), " rows");
    return plan;
}

const char* plan_kernel_name(const AttentionPlan& plan) {
    static constexpr const char* kNames[3][8] = {
        {"attention_portable_r1", "attention_portable_r2", "attention_portable_r3", "attention_portable_r4"},
        {"attention_avx2_r1", "attention_avx2_r2", "attention_avx2_r3", "attention_avx2_r4"},
        {"attention_avx512_r1", "attention_avx512_r2", "attention_avx512_r3", "attention_avx512_r4",
         "attention_avx512_r5", "attention_avx512_r6", "attention_avx512_r7", "attention_avx512_r8"}};
    return kNames[int(plan.family)][plan.rows - 1];
}

AttentionPlan attention_plan(qjit_context& context, const qjit_attention_shape& shape, qjit_kv_type type) {
    const std::array<int, 4> key{shape.head_size, shape.n_heads, shape.n_kv_heads, int(type)};
    std::lock_guard lock(context.attention_plans.mutex);
    const auto known = context.attention_plans.chosen.find(key);
    if (known != context.attention_plans.chosen.end()) return known->second;
    AttentionTarget target(context, shape, type);
    const TuningPolicy policy{"", context.tuning_mode, context.tuning_budget_ms, true};
    const AttentionPlan plan = parse_plan(tune(target, policy, context.tuning).tiling);
    context.attention_plans.chosen[key] = plan;
    return plan;
}

}  // namespace qjit::ops
