#include "jit/knob_text.hpp"

#include <algorithm>
#include <stdexcept>

#include "base/error.hpp"

namespace qjit::jit {

std::vector<KnobItem> knob_items(const std::string& text, const std::string& what) {
    std::vector<KnobItem> items;
    if (text.empty()) return items;
    size_t start = 0;
    while (true) {
        const size_t end = std::min(text.find(',', start), text.size());
        const std::string item = text.substr(start, end - start);
        const size_t eq = item.find('=');
        require(eq != std::string::npos, what, " '", text, "': item '", item, "' is not knob=value");
        items.push_back({item.substr(0, eq), item.substr(eq + 1)});
        if (end == text.size()) return items;
        start = end + 1;
    }
}

int knob_integer(const KnobItem& item, const std::string& text, const std::string& what) {
    size_t used = 0;
    int number = 0;
    try {
        number = std::stoi(item.value, &used);
    } catch (const std::logic_error&) {
        used = 0;
    }
    require(used > 0 && used == item.value.size(), what, " '", text, "': ", item.name, "='", item.value,
            "' is not an integer");
    return number;
}

void refuse_unknown_knob(const KnobItem& item, const std::string& text, const std::string& what,
                         const std::vector<std::string>& names) {
    std::string listed;
    for (const std::string& name : names) listed += (listed.empty() ? "" : ", ") + name;
    fail(QJIT_ERROR_INVALID_ARGUMENT, what, " '", text, "': unknown knob '", item.name, "' (", listed, ")");
}

}  // namespace qjit::jit
