// The model's loops between its linear layers (norms, RoPE, attention, SwiGLU) on the threads of the
// qjit context its layers run on (qjit_parallel_for), so that they and the layers share one pool.
#pragma once

#include <cstdint>

#include "models/fail.hpp"
#include "qjit/qjit.h"

namespace qjit_models {

// The work (multiply-adds or element operations) below which a loop between the layers runs on
// the calling thread: a dispatch to the pool costs about a microsecond.
inline constexpr int64_t kParallelGrainWork = int64_t(1) << 14;

// body(begin, end) over [0, count): on `context`'s threads in ranges of at least `grain`, or on the
// calling thread alone when there is no context or the loop is not larger than one grain. body must
// not throw (it runs behind the C API).
template <typename Body>
void parallel_loop(qjit_context* context, int64_t count, int64_t grain, const Body& body) {
    if (count <= 0) return;
    if (context == nullptr || count <= grain) {
        body(int64_t(0), count);
        return;
    }
    const qjit_range_fn range = [](void* user, int64_t begin, int64_t end) {
        (*static_cast<const Body*>(user))(begin, end);
    };
    if (qjit_parallel_for(context, count, grain, range, const_cast<Body*>(&body)) != QJIT_OK)
        fail("qjit_parallel_for: ", qjit_last_error());
}

}  // namespace qjit_models
