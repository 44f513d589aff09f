#include "runtime/ffn/ffn_parts.hpp"

#include <algorithm>

#include "base/activation_arrays.hpp"
#include "base/error.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

namespace {

// Values one activation task covers: its work outweighs taking it from the pool.
constexpr int64_t kActivationChunk = 4096;

}  // namespace

int64_t FfnParts::inputs() const { return up->params.k; }
int64_t FfnParts::hidden() const { return up->params.n; }
int64_t FfnParts::outputs() const { return down->params.n; }
ThreadPool& FfnParts::pool() const { return *up->context->pool; }

qjit_ffn_activation ffn_activation_of(int value, const char* name) {
    require(value == QJIT_FFN_RELU || value == QJIT_FFN_SWIGLU || value == QJIT_FFN_GELU, name, " is ", value,
            "; expected QJIT_FFN_RELU (0), QJIT_FFN_SWIGLU (1) or QJIT_FFN_GELU (2)");
    return static_cast<qjit_ffn_activation>(value);
}

void check_ffn_parts(const FfnParts& parts, const qjit_context* context, const std::string& name) {
    require(parts.up != nullptr, name, "up is NULL");
    require(parts.down != nullptr, name, "down is NULL");
    if (parts.gated())
        require(parts.gate != nullptr, name, "gate is NULL; a QJIT_FFN_SWIGLU FFN needs it");
    else
        require(parts.gate == nullptr, name, "gate is not NULL; only a QJIT_FFN_SWIGLU FFN has a gate");
    for (const auto& [layer, part] : {std::pair{parts.gate, "gate"}, {parts.up, "up"}, {parts.down, "down"}})
        require(layer == nullptr || layer->context == context, name, part, " belongs to another context");
    const QuantParams &up = parts.up->params, &down = parts.down->params;
    if (parts.gate)
        require(parts.gate->params.k == up.k && parts.gate->params.n == up.n, name, "gate is K=", parts.gate->params.k,
                " N=", parts.gate->params.n, "; ", name, "up is K=", up.k, " N=", up.n, ": they must be the same shape");
    require(down.k == up.n, name, "down has K=", down.k, " inputs; ", name, "up has N=", up.n,
            " outputs: they must be equal");
}

void activate(const FfnParts& parts, float* up, const float* gate, int64_t count) {
    const qjit_isa isa = parts.up->context->isa;
    auto range = [&](int64_t chunk) {
        const int64_t begin = chunk * kActivationChunk, n = std::min(kActivationChunk, count - begin);
        switch (parts.activation) {
        case QJIT_FFN_SWIGLU: swiglu_in_place(isa, up + begin, gate + begin, n); break;
        case QJIT_FFN_GELU: gelu_in_place(up + begin, n); break;
        case QJIT_FFN_RELU: relu_in_place(up + begin, n); break;
        case QJIT_FFN_ACTIVATION_MIN_ENUM:
        case QJIT_FFN_ACTIVATION_MAX_ENUM: fail(QJIT_ERROR_INVALID_ARGUMENT, "activation is not a qjit_ffn_activation");
        }
    };
    const int64_t chunks = (count + kActivationChunk - 1) / kActivationChunk;
    parts.pool().parallel_for(chunks, range, chunks > 1);
}

}  // namespace qjit
