#include "runtime/layer_benchmark.hpp"

#include <utility>
#include <vector>

#include "runtime/linear_layer.hpp"
#include "tuner/timed_search.hpp"

namespace qjit {

double benchmark_linear(const qjit_linear& layer, int64_t m, int repeats, bool cold) {
    std::vector<float> x(size_t(m * layer.params.k)), y(size_t(m * layer.params.n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 23) - 11) * 0.0625f;
    CandidateRun call;
    if (cold) call.prepare = [&] { evict_layer_from_caches(layer); };
    call.run = [&] { linear_forward(layer, x.data(), m, y.data()); };
    return measure(timed_on_host(std::move(call)), repeats).median_seconds;
}

}  // namespace qjit
