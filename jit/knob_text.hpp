// A tiling's text, as the tuning database and the users' options spell it: "knob=integer" items
// joined by commas ("tu=4,mb=2"). One reader for every generator family (the x86 GEMM, the sparse
// products, CUDA); each keeps its own knobs and ranges.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace qjit::jit {

struct KnobItem {
    std::string name, value;
};

// A family's integer knobs: each name and the tiling's field it sets.
template <typename Tiling>
using KnobTable = std::vector<std::pair<const char*, int Tiling::*>>;

// The items of `text` in order ("" has none). An item without '=' (an empty one included) is
// refused with QJIT_ERROR_INVALID_ARGUMENT, in a message that starts with `what` ("tiling",
// "CUDA tiling") and quotes the text.
std::vector<KnobItem> knob_items(const std::string& text, const std::string& what);

// The item's value as an integer, or the same error naming it.
int knob_integer(const KnobItem& item, const std::string& text, const std::string& what);

// The same error for a knob of no such name; the message lists `names`.
[[noreturn]] void refuse_unknown_knob(const KnobItem& item, const std::string& text, const std::string& what,
                                      const std::vector<std::string>& names);

// Sets the knob `item` names in `tiling`; `other_names` (knobs the caller reads itself, whose
// values are no integers) joins the list an unknown name is refused with.
template <typename Tiling>
void set_knob(Tiling& tiling, const KnobItem& item, const std::string& text, const std::string& what,
              const KnobTable<Tiling>& knobs, const std::vector<std::string>& other_names = {}) {
    for (const auto& [name, field] : knobs)
        if (item.name == name) {
            tiling.*field = knob_integer(item, text, what);
            return;
        }
    std::vector<std::string> names = other_names;
    for (const auto& knob : knobs) names.emplace_back(knob.first);
    refuse_unknown_knob(item, text, what, names);
}

// `tiling` with every item of `text` set through `knobs`.
template <typename Tiling>
Tiling read_knobs(const std::string& text, const std::string& what, const KnobTable<Tiling>& knobs, Tiling tiling) {
    for (const KnobItem& item : knob_items(text, what)) set_knob(tiling, item, text, what, knobs);
    return tiling;
}

}  // namespace qjit::jit
