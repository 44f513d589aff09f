// The classifier's greedy choice without a softmax: the first index of each row's largest value,
// a row split among the context's threads when it is long (a vocabulary) and rows spread when
// they are many.
#pragma once

#include <cstdint>

#include "runtime/context.hpp"

namespace qjit::ops {

// indices[r] = the first index of the largest of values[r * size, (r + 1) * size); 0 for a row of
// -inf alone. A NaN is refused, naming its row and index.
void argmax_rows(qjit_context& context, const float* values, int64_t rows, int64_t size, int64_t* indices);

}  // namespace qjit::ops
