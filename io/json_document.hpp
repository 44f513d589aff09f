// JSON text from files on disk (layer file headers, checkpoint configs, safetensors headers, pack
// tables), parsed into a tree that can be freed without allocating.
//
// nlohmann::json's destructor, which is noexcept, moves a container's elements into a std::vector
// it reserves before freeing them: an allocation that fails there ends the process. A tree freed
// while a failed allocation unwinds would turn QJIT_ERROR_OUT_OF_MEMORY into an abort. A
// JsonDocument builds its tree itself (nlohmann's SAX parser), caps how deep it nests, and takes
// it apart leaf first before it goes, so that every container nlohmann frees is empty.
// Only sources that already use nlohmann-json include this.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

namespace qjit {

class JsonDocument {
public:
    // Deeper nesting is refused: no file qjit reads nests more than a few levels, and the
    // teardown recurses.
    static constexpr int kMaxDepth = 64;

    JsonDocument() = default;  // null
    // QJIT_ERROR_CORRUPT_DATA naming `what` ("'config.json'", "the header") for text that is not
    // one JSON value, nests deeper than kMaxDepth or holds a number beyond a double.
    JsonDocument(std::string_view text, std::string_view what);
    JsonDocument(JsonDocument&& other) noexcept = default;
    JsonDocument& operator=(JsonDocument&& other) noexcept;

    const nlohmann::json& root() const { return root_.value; }

private:
    // The tree's owner as a member, so that a constructor that throws halfway takes apart what it built.
    struct Tree {
        nlohmann::json value;
        Tree() = default;
        Tree(Tree&&) noexcept = default;
        ~Tree();
    };
    Tree root_;
};

// Empties `value`'s containers, deepest first, without allocating (pop_back and erase only).
// Recursion is as deep as the tree: kMaxDepth for a JsonDocument's.
void take_apart(nlohmann::json& value) noexcept;

}  // namespace qjit
