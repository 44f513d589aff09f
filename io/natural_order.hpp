// Names in the order a person reads them: runs of digits compared as numbers, so that
// "layers.2.mlp" comes before "layers.10.mlp" (checkpoints list their layers in this order).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace qjit {

bool natural_less(const std::string& a, const std::string& b);

// Items with a `name` (a checkpoint's layers), sorted into natural order of their names.
template <typename Named>
void sort_by_natural_name(std::vector<Named>& items) {
    std::sort(items.begin(), items.end(), [](const Named& a, const Named& b) { return natural_less(a.name, b.name); });
}

// The item named `name`, or null.
template <typename Named>
const Named* find_named(const std::vector<Named>& items, const std::string& name) {
    for (const Named& item : items)
        if (item.name == name) return &item;
    return nullptr;
}

}  // namespace qjit
