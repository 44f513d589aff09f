#include "tuner/legacy_kernel_key.hpp"

#include <cctype>
#include <cstdlib>
#include <vector>

namespace qjit {

namespace {

// `text` split at '_'.
std::vector<std::string> fields_of(const std::string& text) {
    std::vector<std::string> fields(1);
    for (char c : text) {
        if (c == '_')
            fields.emplace_back();
        else
            fields.back() += c;
    }
    return fields;
}

bool all_digits(const std::string& s) {
    if (s.empty()) return false;
    for (char c : s)
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

// "q4g128" / "q3col": the width is one of 2, 3, 4, 8 and the grouping g<digits> or col.
bool is_width_and_grouping(const std::string& s) {
    if (s.size() < 3 || s[0] != 'q' || (s[1] != '2' && s[1] != '3' && s[1] != '4' && s[1] != '8')) return false;
    const std::string grouping = s.substr(2);
    return grouping == "col" || (grouping[0] == 'g' && all_digits(grouping.substr(1)));
}

bool is_symmetry(const std::string& s) { return s == "sym" || s == "asym"; }

}  // namespace

std::optional<std::string> migrated_kernel_key(const std::string& key) {
    const size_t space = key.find(' ');
    if (space == std::string::npos) return std::nullopt;
    const std::string family = key.substr(0, space), rest = key.substr(space);  // rest: " K=... N=..."
    std::vector<std::string> f = fields_of(family);
    // gemm _ q4g128 _ asym _ i8|f32 _ isa [_ s32]
    if (f.size() >= 5 && f[0] == "gemm") {
        const bool s32 = f.size() == 6 && f[5] == "s32";
        if ((f.size() == 5 || s32) && is_width_and_grouping(f[1]) && f[1].substr(2) != "col" && is_symmetry(f[2]) &&
            (f[3] == "i8" || f[3] == "f32") && !f[4].empty() && rest.rfind(" K=", 0) == 0) {
            // One group over the column was named by its rows rounded up to 32.
            const long long group = std::atoll(f[1].c_str() + 3), k = std::atoll(rest.c_str() + 3);
            const std::string width_and_grouping = group >= k ? f[1].substr(0, 2) + "col" : f[1];
            return width_and_grouping + "_" + f[2] + (s32 ? "_s32" : "") + "_gemm_" + f[3] + "_" + f[4] + rest;
        }
    }
    // cuda _ q4g128 _ asym _ f16|bf16 [_ s32] _ sm90
    if (f.size() >= 5 && f[0] == "cuda") {
        const bool s32 = f.size() == 6 && f[4] == "s32";
        const std::string& arch = f.back();
        if ((f.size() == 5 || s32) && is_width_and_grouping(f[1]) && is_symmetry(f[2]) &&
            (f[3] == "f16" || f[3] == "bf16") && arch.rfind("sm", 0) == 0 && all_digits(arch.substr(2)))
            return f[1] + "_" + f[2] + (s32 ? "_s32" : "") + "_cuda_" + f[3] + "_" + arch + rest;
    }
    return std::nullopt;
}

}  // namespace qjit
