// libFuzzer target: the tuning database's text parser (tuner/tuning_db.cpp), which must never
// throw: damaged parts are counted and skipped. Every record it returns must print again. The
// records' tilings then go through the attention plans' parser (runtime/ops/attention_plan.cpp),
// which refuses a bad one with a qjit::Error and reads a good one back to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.hpp"
#include "runtime/ops/attention_plan.hpp"
#include "tuner/tuning_db.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const qjit::ParsedTuningDb parsed = qjit::parse_tuning_db(std::string(reinterpret_cast<const char*>(data), size));
    (void)qjit::format_listing(parsed.records, "fuzz");
    for (const qjit::TuningRecord& record : parsed.records) {
        try {
            const std::string text = qjit::ops::plan_text(qjit::ops::parse_plan(record.tiling));
            if (qjit::ops::plan_text(qjit::ops::parse_plan(text)) != text) std::abort();
        } catch (const qjit::Error&) {
            // refused by name: what a stored tiling of another kind, or a damaged one, gets
        }
    }
    return 0;
}
