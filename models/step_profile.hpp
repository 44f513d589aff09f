// Where a Llama forward's time goes, step by step: a model given a StepProfile
// (Model::set_step_profile) adds each step's wall time to it. qjit-run --profile prints it per
// decoded token.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace qjit_models::llama {

enum class Step { Embed, Norms, QkvProjections, Rope, KvStore, Attention, OutputProjection, Ffn, Residuals, Classifier };
inline constexpr int kStepCount = int(Step::Classifier) + 1;
// As printed, and as JSON keys (qjit-run --json: step_ms_<key>).
inline constexpr const char* kStepNames[kStepCount] = {"embedding", "RMSNorm",   "q, k, v products", "RoPE",
                                                       "KV store",  "attention", "output product",   "FFN",
                                                       "residual adds", "classifier"};
inline constexpr const char* kStepKeys[kStepCount] = {"embedding", "rms_norm",  "qkv", "rope",     "kv_store",
                                                      "attention", "output",    "ffn", "residual", "classifier"};

struct StepProfile {
    std::array<double, kStepCount> seconds{};
    double total() const {
        double sum = 0;
        for (double s : seconds) sum += s;
        return sum;
    }
};

// Adds the wall time from its construction to its destruction to `profile` (none when null).
class StepTimer {
public:
    StepTimer(StepProfile* profile, Step step) : profile_(profile), step_(step) {
        if (profile_) start_ = std::chrono::steady_clock::now();
    }
    ~StepTimer() {
        if (profile_)
            profile_->seconds[size_t(step_)] +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
    StepTimer(const StepTimer&) = delete;
    StepTimer& operator=(const StepTimer&) = delete;

private:
    StepProfile* profile_;
    Step step_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace qjit_models::llama
