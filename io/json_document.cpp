#include "io/json_document.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace qjit {

using nlohmann::json;

namespace {

// nlohmann's SAX events, built into `root`. Every value is made in place, in its parent's
// container: a container is never freed with elements in it, even when an event throws.
class TreeBuilder final : public nlohmann::json_sax<json> {
public:
    TreeBuilder(json& root, std::string_view what) : root_(root), what_(what) {
        open_.reserve(JsonDocument::kMaxDepth);  // so that open() cannot fail between adding and pushing
    }

    bool null() override { return add(json(nullptr)); }
    bool boolean(bool value) override { return add(json(value)); }
    bool number_integer(number_integer_t value) override { return add(json(value)); }
    bool number_unsigned(number_unsigned_t value) override { return add(json(value)); }
    bool number_float(number_float_t value, const string_t& text) override {
        if (!std::isfinite(value)) fail(QJIT_ERROR_CORRUPT_DATA, what_, " holds a number beyond a double: ", text);
        return add(json(value));
    }
    bool string(string_t& value) override { return add(json(std::move(value))); }
    bool binary(binary_t&) override { fail(QJIT_ERROR_CORRUPT_DATA, what_, " holds binary data, which JSON text cannot"); }
    bool start_object(std::size_t) override { return open(json::object()); }
    bool key(string_t& key) override {
        key_ = std::move(key);
        return true;
    }
    bool end_object() override { return close(); }
    bool start_array(std::size_t) override { return open(json::array()); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) override {
        fail(QJIT_ERROR_CORRUPT_DATA, what_, " is not valid JSON: ", error.what());
    }

private:
    // `value` holds no elements (a scalar or an empty container), so freeing it never allocates.
    bool add(json value) {
        if (open_.empty()) {
            root_ = std::move(value);
            return true;
        }
        json& parent = *open_.back();
        if (parent.is_array()) {
            parent.push_back(std::move(value));
            return true;
        }
        json& slot = parent[key_];
        take_apart(slot);  // a key given twice: the later value wins, as nlohmann's own parser has it
        slot = std::move(value);
        return true;
    }

    json& last_added() {
        if (open_.empty()) return root_;
        json& parent = *open_.back();
        return parent.is_array() ? parent.back() : parent[key_];
    }

    bool open(json container) {
        if (open_.size() == size_t(JsonDocument::kMaxDepth))
            fail(QJIT_ERROR_CORRUPT_DATA, what_, " nests deeper than ", JsonDocument::kMaxDepth, " levels");
        add(std::move(container));
        open_.push_back(&last_added());
        return true;
    }

    bool close() {
        open_.pop_back();
        return true;
    }

    json& root_;
    std::string_view what_;
    std::vector<json*> open_;  // the containers being filled, outermost first
    std::string key_;
};

}  // namespace

void take_apart(json& value) noexcept {
    if (value.is_array()) {
        auto& elements = value.get_ref<json::array_t&>();
        while (!elements.empty()) {
            take_apart(elements.back());
            elements.pop_back();
        }
    } else if (value.is_object()) {
        auto& members = value.get_ref<json::object_t&>();
        while (!members.empty()) {
            const auto last = std::prev(members.end());
            take_apart(last->second);
            members.erase(last);
        }
    }
}

JsonDocument::Tree::~Tree() { take_apart(value); }

JsonDocument::JsonDocument(std::string_view text, std::string_view what) {
    TreeBuilder builder(root_.value, what);
    json::sax_parse(text.begin(), text.end(), &builder);
}

JsonDocument& JsonDocument::operator=(JsonDocument&& other) noexcept {
    take_apart(root_.value);
    root_.value = std::move(other.root_.value);
    return *this;
}

}  // namespace qjit
