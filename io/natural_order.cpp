#include "io/natural_order.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string_view>

namespace qjit {

bool natural_less(const std::string& a, const std::string& b) {
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (std::isdigit(uint8_t(a[i])) && std::isdigit(uint8_t(b[j]))) {
            size_t i_end = i, j_end = j;
            while (i_end < a.size() && std::isdigit(uint8_t(a[i_end]))) ++i_end;
            while (j_end < b.size() && std::isdigit(uint8_t(b[j_end]))) ++j_end;
            const std::string_view x = std::string_view(a).substr(i, i_end - i);
            const std::string_view y = std::string_view(b).substr(j, j_end - j);
            const size_t x_digits = x.size() - std::min(x.find_first_not_of('0'), x.size());
            const size_t y_digits = y.size() - std::min(y.find_first_not_of('0'), y.size());
            if (x_digits != y_digits) return x_digits < y_digits;
            if (const int order = x.substr(x.size() - x_digits).compare(y.substr(y.size() - y_digits)); order != 0)
                return order < 0;
            i = i_end;
            j = j_end;
        } else {
            if (a[i] != b[j]) return a[i] < b[j];
            ++i;
            ++j;
        }
    }
    return a.size() - i < b.size() - j;
}

}  // namespace qjit
