// Timing a layer's forward the way the tuner times candidates (tuner/timed_search.hpp's protocol):
// what qjit_linear_benchmark runs.
#pragma once

#include <cstdint>

struct qjit_linear;

namespace qjit {

// Median seconds of `repeats` forwards of m rows of random activations; with `cold`, the layer's
// weights are evicted from the caches before each call.
double benchmark_linear(const qjit_linear& layer, int64_t m, int repeats, bool cold);

}  // namespace qjit
