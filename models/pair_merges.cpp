#include "models/pair_merges.hpp"

#include <algorithm>
#include <queue>

#include "models/unicode_text.hpp"

namespace qjit_models {

namespace {

// A stretch of the text, linked to its neighbours; a symbol joined into its left one is empty.
struct Symbol {
    size_t begin = 0, length = 0;
    int prev = -1, next = -1;
};

struct Pair {
    double priority;
    int left, right;
    size_t length;  // the joined text's: a pair whose symbols changed since it was queued is stale
    // std::priority_queue pops the largest: the highest priority, then the leftmost.
    bool operator<(const Pair& other) const {
        return priority != other.priority ? priority < other.priority : left > other.left;
    }
};

}  // namespace

std::vector<std::string_view> merge_pairs(std::string_view text, const PairPriority& priority) {
    std::vector<Symbol> symbols;
    for (size_t at = 0; at < text.size();) {
        const size_t length = std::min(utf8_sequence_length(uint8_t(text[at])), text.size() - at);
        symbols.push_back({at, length, int(symbols.size()) - 1, -1});
        if (symbols.size() > 1) symbols[symbols.size() - 2].next = int(symbols.size()) - 1;
        at += length;
    }
    const auto view = [&](const Symbol& s) { return text.substr(s.begin, s.length); };
    std::priority_queue<Pair> queue;
    const auto add_pair = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const Symbol &a = symbols[size_t(left)], &b = symbols[size_t(right)];
        if (const std::optional<double> p = priority(view(a), view(b))) queue.push({*p, left, right, a.length + b.length});
    };
    for (size_t i = 1; i < symbols.size(); ++i) add_pair(int(i) - 1, int(i));
    while (!queue.empty()) {
        const Pair pair = queue.top();
        queue.pop();
        Symbol &left = symbols[size_t(pair.left)], &right = symbols[size_t(pair.right)];
        if (left.length == 0 || right.length == 0 || left.next != pair.right || left.length + right.length != pair.length)
            continue;
        left.length += right.length;
        right.length = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[size_t(right.next)].prev = pair.left;
        add_pair(left.prev, pair.left);
        add_pair(pair.left, left.next);
    }
    std::vector<std::string_view> merged;
    for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) merged.push_back(view(symbols[size_t(i)]));
    return merged;
}

}  // namespace qjit_models
