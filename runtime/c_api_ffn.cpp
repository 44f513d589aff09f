// The C API of FFN handles (include/qjit/qjit_ffn.h): argument checks, then the strategies of
// runtime/ffn/.
#include <cstring>
#include <variant>
#include <vector>

#include "base/error.hpp"
#include "qjit/qjit_ffn.h"
#include "runtime/ffn/dense_ffn.hpp"
#include "runtime/ffn/experts_ffn.hpp"
#include "runtime/ffn/flash_layer_ffn.hpp"
#include "runtime/flash/flash_ffn_handle.hpp"
#include "runtime/forward_arguments.hpp"
#include "runtime/linear_layer.hpp"

using namespace qjit;

// One strategy over borrowed layers: a dense FFN, the experts of one, or a layer of a flash FFN.
struct qjit_ffn {
    std::variant<FfnParts, std::vector<FfnParts>, FlashLayerFfn> strategy;
};

namespace {

// x (m x K) and y (m x N) for the FFN's shapes.
void require_ffn_activations(const float* x, int64_t m, int64_t k, const float* y, int64_t n) {
    require(x != nullptr, "x is NULL");
    require(y != nullptr, "y is NULL");
    require_activations(x, m, k, y, n);
}

qjit_ffn* make_handle(decltype(qjit_ffn::strategy) strategy) { return new qjit_ffn{std::move(strategy)}; }

// The caller's activation as the int it passed: its bytes, never loaded as the enum, whose
// out-of-range values (a C caller's -1) are undefined in C++.
int activation_bits(const qjit_ffn_activation& activation) {
    static_assert(sizeof(int) == sizeof(qjit_ffn_activation));
    int bits;
    std::memcpy(&bits, &activation, sizeof bits);
    return bits;
}

}  // namespace

extern "C" {

qjit_status qjit_ffn_create_dense(qjit_context* context, qjit_linear* gate, qjit_linear* up, qjit_linear* down,
                                  qjit_ffn_activation activation, qjit_ffn** ffn) {
    return guarded([&] {
        require(ffn != nullptr, "ffn (the output pointer) is NULL");
        *ffn = nullptr;
        require(context != nullptr, "context is NULL");
        const FfnParts parts{ffn_activation_of(activation_bits(activation), "activation"), gate, up, down};
        check_ffn_parts(parts, context, "");
        *ffn = make_handle(parts);
    });
}

qjit_status qjit_ffn_create_experts(qjit_context* context, const qjit_ffn_parts* experts, int num_experts,
                                    qjit_ffn_activation activation, qjit_ffn** ffn) {
    return guarded([&] {
        require(ffn != nullptr, "ffn (the output pointer) is NULL");
        *ffn = nullptr;
        require(context != nullptr, "context is NULL");
        require(experts != nullptr, "experts is NULL");
        require(num_experts >= 1, "num_experts is ", num_experts, "; expected 1 or more");
        const qjit_ffn_activation checked = ffn_activation_of(activation_bits(activation), "activation");
        std::vector<FfnParts> parts;
        for (int e = 0; e < num_experts; ++e) {
            parts.push_back({checked, experts[e].gate, experts[e].up, experts[e].down});
            check_ffn_parts(parts.back(), context, concat("experts[", e, "]."));
            const FfnParts& first = parts.front();
            require(parts.back().inputs() == first.inputs() && parts.back().hidden() == first.hidden() &&
                        parts.back().outputs() == first.outputs(),
                    "experts[", e, "] is K=", parts.back().inputs(), " H=", parts.back().hidden(), " N=", parts.back().outputs(),
                    "; experts[0] is K=", first.inputs(), " H=", first.hidden(), " N=", first.outputs(),
                    " (every expert needs the same)");
        }
        *ffn = make_handle(std::move(parts));
    });
}

qjit_status qjit_ffn_create_flash_layer(qjit_flash_ffn* flash, int64_t layer, qjit_ffn** ffn) {
    return guarded([&] {
        require(ffn != nullptr, "ffn (the output pointer) is NULL");
        *ffn = nullptr;
        require(flash != nullptr && flash->ffn, "flash is NULL");
        const int64_t layers = flash->ffn->header().layers;
        require(layer >= 0 && layer < layers, "layer is ", layer, "; the flash FFN has layers 0 .. ", layers - 1);
        *ffn = make_handle(FlashLayerFfn{flash->ffn.get(), layer});
    });
}

qjit_status qjit_ffn_destroy(qjit_ffn* ffn) {
    return guarded([&] { delete ffn; });
}

qjit_status qjit_ffn_forward(qjit_ffn* ffn, const float* x, int64_t m, float* y) {
    return guarded([&] {
        require(ffn != nullptr, "ffn is NULL");
        if (const auto* parts = std::get_if<FfnParts>(&ffn->strategy)) {
            require_ffn_activations(x, m, parts->inputs(), y, parts->outputs());
            dense_ffn_forward(*parts, x, m, y);
        } else if (const auto* flash = std::get_if<FlashLayerFfn>(&ffn->strategy)) {
            require_ffn_activations(x, m, flash->inputs(), y, flash->inputs());
            flash->forward(x, m, y);
        } else {
            fail(QJIT_ERROR_INVALID_ARGUMENT, "ffn is an experts FFN; it runs with qjit_ffn_forward_routed");
        }
    });
}

qjit_status qjit_ffn_forward_routed(qjit_ffn* ffn, const qjit_ffn_route* routes, int num_routes, const float* x,
                                    int64_t m, float* y) {
    return guarded([&] {
        require(ffn != nullptr, "ffn is NULL");
        const auto* experts = std::get_if<std::vector<FfnParts>>(&ffn->strategy);
        require(experts != nullptr, "ffn is not an experts FFN; it runs with qjit_ffn_forward");
        require(routes != nullptr, "routes is NULL");
        require(num_routes == int(experts->size()), "num_routes is ", num_routes, "; the FFN has ", experts->size(),
                " experts");
        require_ffn_activations(x, m, experts->front().inputs(), y, experts->front().outputs());
        require_routes(routes, num_routes, m, "routes");
        experts_ffn_forward(*experts, routes, x, m, y);
    });
}

}  // extern "C"
