#include "tuner/legacy_kernel_key.hpp"

#include <regex>

namespace qjit {

std::optional<std::string> migrated_kernel_key(const std::string& key) {
    // 1 bits, 2 group rows, 3 sym|asym, 4 i8|f32, 5 isa, 6 _s32, 7 K, 8 the rest of the key
    static const std::regex cpu("gemm_q([2348])g([0-9]+)_(sym|asym)_(i8|f32)_([a-z0-9]+?)(_s32)? K=([0-9]+)( .*)");
    // 1 bits, 2 gG|col, 3 sym|asym, 4 f16|bf16, 5 _s32, 6 sm arch and the rest of the key
    static const std::regex gpu("cuda_q([2348])(g[0-9]+|col)_(sym|asym)_(f16|bf16)(_s32)?_(sm[0-9]+ .*)");
    std::smatch m;
    if (std::regex_match(key, m, cpu)) {
        const long long group = std::stoll(m[2]), k = std::stoll(m[7]);
        const std::string grouping = group >= k ? "col" : "g" + m[2].str();
        return "q" + m[1].str() + grouping + "_" + m[3].str() + m[6].str() + "_gemm_" + m[4].str() + "_" + m[5].str() +
               " K=" + m[7].str() + m[8].str();
    }
    if (std::regex_match(key, m, gpu))
        return "q" + m[1].str() + m[2].str() + "_" + m[3].str() + m[5].str() + "_cuda_" + m[4].str() + "_" + m[6].str();
    return std::nullopt;
}

}  // namespace qjit
