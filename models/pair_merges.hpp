// The merging both GGUF tokenizer families share: a text starts as one symbol per UTF-8 character
// (a byte that starts no character is a symbol of its own), and the adjacent pair of highest
// priority is joined, the leftmost first among equals, until no pair has one. BPE ranks a pair by
// its merge's place in the merge list, SentencePiece by the score of the token it joins into.
#pragma once

#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace qjit_models {

// The priority of joining `left` and `right` (adjacent views into the text); nullopt: never.
using PairPriority = std::function<std::optional<double>(std::string_view left, std::string_view right)>;

// The symbols left when no pair can be joined, in order, as views into `text`.
std::vector<std::string_view> merge_pairs(std::string_view text, const PairPriority& priority);

}  // namespace qjit_models
