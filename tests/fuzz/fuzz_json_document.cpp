// libFuzzer target: io/json_document.cpp, differentially. Any text the document accepts,
// nlohmann::json::parse accepts into an equal tree; any text parse accepts, the document accepts
// too unless it nests deeper than JsonDocument::kMaxDepth. A mismatch aborts (a finding).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "io/json_document.hpp"

namespace {

int depth(const nlohmann::json& value) {
    int deepest = 0;
    if (value.is_structured())
        for (const nlohmann::json& element : value) deepest = std::max(deepest, depth(element));
    return value.is_structured() ? deepest + 1 : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    nlohmann::json reference;
    bool reference_accepts = true;
    try {
        reference = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
        reference_accepts = false;
    }
    try {
        const qjit::JsonDocument document(text, "the input");
        if (!reference_accepts || document.root() != reference) std::abort();
    } catch (const qjit::Error&) {
        if (reference_accepts && depth(reference) <= qjit::JsonDocument::kMaxDepth) std::abort();
    }
    return 0;
}
