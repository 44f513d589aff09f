// libFuzzer target: the tuning database's text parser (tuner/tuning_db.cpp), which must never
// throw: damaged parts are counted and skipped. Every record it returns must print again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tuner/tuning_db.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const qjit::ParsedTuningDb parsed = qjit::parse_tuning_db(std::string(reinterpret_cast<const char*>(data), size));
    (void)qjit::format_listing(parsed.records, "fuzz");
    return 0;
}
