// The C API of tensor-parallel MLPs (include/qjit/qjit_tp.h): shards made from GPTQ tensors, a
// checkpoint's layers or fp32 weights; the forward over the caller's communicator; files.
#include <functional>
#include <variant>
#include <vector>

#include "base/error.hpp"
#include "format/gptq_import.hpp"
#include "quant/quantize_hqq.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/tp_shards.hpp"
#include "qjit/qjit_tp.h"
#include "runtime/checkpoint_handle.hpp"
#include "runtime/f32_layer.hpp"
#include "runtime/forward_arguments.hpp"
#include "runtime/quant_config.hpp"
#include "runtime/tp_mlp.hpp"
#include "runtime/tp_mlp_cuda.hpp"
#include "runtime/tp_mlp_file.hpp"

using namespace qjit;

namespace {

QuantizedMatrix imported(int64_t k, int64_t n, const qjit_gptq_tensors& tensors, const char* name) {
    validate_shape(k, n);
    try {
        return import_gptq(k, n, tensors);
    } catch (const Error& e) {
        fail(e.status(), name, ": ", e.what());
    }
}

// W ([out][in], as nn.Linear stores it) quantized whole, by a method whose result can be sharded.
QuantizedMatrix quantized(const qjit_quant_config& config, int64_t k, int64_t n, const float* weights_n_by_k,
                          const char* name) {
    require(weights_n_by_k != nullptr, name, " is NULL");
    validate_shape(k, n);
    const QuantizerConfig quantizer = quantizer_config(config, k, n);
    const std::vector<float> w = k_by_n_from_n_by_k(weights_n_by_k, k, n);
    if (const auto* rtn = std::get_if<WeightFormat>(&quantizer)) return quantize_rtn(*rtn, k, n, w.data());
    if (const auto* hqq = std::get_if<HqqConfig>(&quantizer)) return quantize_hqq(*hqq, k, n, w.data());
    fail(QJIT_ERROR_UNSUPPORTED, "config->method is ", int(config.method),
         "; tensor-parallel MLPs from fp32 weights take QJIT_QUANT_RTN or QJIT_QUANT_HQQ (import GPTQ tensors "
         "for act-order layers)");
}

qjit_status made(qjit_tp_mlp** out, const std::function<std::unique_ptr<qjit_tp_mlp>()>& make) {
    return guarded([&] {
        require(out != nullptr, "out (the output pointer) is NULL");
        *out = nullptr;
        *out = make().release();
    });
}

}  // namespace

extern "C" {

qjit_status qjit_tp_mlp_create_from_gptq(qjit_context* context, const qjit_mlp_gptq* mlp, int rank, int world_size,
                                         qjit_tp_algorithm algorithm, qjit_tp_mlp** out) {
    return made(out, [&] {
        require(mlp != nullptr, "mlp is NULL");
        MlpMatrices matrices{mlp->kind,
                             imported(mlp->k1, mlp->n1, mlp->up, "mlp->up"),
                             mlp->kind == QJIT_MLP_SWIGLU ? imported(mlp->k1, mlp->n1, mlp->gate, "mlp->gate")
                                                          : QuantizedMatrix{},
                             imported(mlp->n1, mlp->n2, mlp->down, "mlp->down")};
        return make_tp_mlp(context, matrices, rank, world_size, algorithm);
    });
}

qjit_status qjit_tp_mlp_create_from_checkpoint(qjit_checkpoint* checkpoint, qjit_mlp_kind kind, const char* up_name,
                                               const char* gate_name, const char* down_name, int rank, int world_size,
                                               qjit_tp_algorithm algorithm, qjit_tp_mlp** out) {
    return made(out, [&] {
        require(checkpoint != nullptr, "checkpoint is NULL");
        const auto matrix = [&](const char* name) {
            const CheckpointLayer& layer = checkpoint_layer(*checkpoint, name);
            return imported(layer.k, layer.n, checkpoint->gptq->tensors(layer).view, name);
        };
        require(kind != QJIT_MLP_SWIGLU || gate_name != nullptr, "gate_name is NULL; a SwiGLU MLP needs its gate");
        MlpMatrices matrices{kind, matrix(up_name), kind == QJIT_MLP_SWIGLU ? matrix(gate_name) : QuantizedMatrix{},
                             matrix(down_name)};
        return make_tp_mlp(checkpoint->context, matrices, rank, world_size, algorithm);
    });
}

qjit_status qjit_tp_mlp_create_from_f32(qjit_context* context, const qjit_quant_config* config, qjit_mlp_kind kind,
                                        int64_t k1, int64_t n1, int64_t n2, const float* up, const float* gate,
                                        const float* down, int rank, int world_size, qjit_tp_algorithm algorithm,
                                        qjit_tp_mlp** out) {
    return made(out, [&] {
        require(config != nullptr, "config is NULL");
        MlpMatrices matrices{kind, quantized(*config, k1, n1, up, "up"),
                             kind == QJIT_MLP_SWIGLU ? quantized(*config, k1, n1, gate, "gate") : QuantizedMatrix{},
                             quantized(*config, n1, n2, down, "down")};
        return make_tp_mlp(context, matrices, rank, world_size, algorithm);
    });
}

qjit_status qjit_tp_mlp_destroy(qjit_tp_mlp* mlp) {
    return guarded([&] { delete mlp; });
}

qjit_status qjit_tp_mlp_forward(qjit_tp_mlp* mlp, const qjit_communicator* comm, const float* x, int64_t m, float* y,
                                qjit_tp_timing* timing) {
    return guarded([&] {
        require(mlp != nullptr, "mlp is NULL");
        require(comm != nullptr, "comm is NULL");
        require(x != nullptr, "x is NULL");
        require(y != nullptr, "y is NULL");
        require_activations(x, m, mlp->k1, y, mlp->n2);
        tp_mlp_forward(*mlp, *comm, x, m, y, timing);
    });
}

qjit_status qjit_tp_mlp_forward_cuda(qjit_tp_mlp* mlp, const qjit_device_communicator* comm, const void* x, int64_t m,
                                     qjit_dtype dtype, void* y, void* stream) {
    return guarded([&] {
        require(mlp != nullptr, "mlp is NULL");
        require(comm != nullptr, "comm is NULL");
        tp_mlp_forward_cuda(*mlp, *comm, x, m, dtype, y, stream);
    });
}

qjit_status qjit_tp_mlp_get_info(const qjit_tp_mlp* mlp, qjit_tp_mlp_info* info) {
    return guarded([&] {
        require(mlp != nullptr, "mlp is NULL");
        require(info != nullptr, "info is NULL");
        info->kind = mlp->kind;
        info->algorithm = mlp->algorithm;
        info->rank = mlp->rank;
        info->world_size = mlp->world_size;
        info->k1 = mlp->k1;
        info->n1 = mlp->n1;
        info->n2 = mlp->n2;
        info->shard_n1 = mlp->shard_n1();
        info->act_order = !is_identity(mlp->down_rows);
        info->weight_bytes =
            weight_bytes(*mlp->up) + weight_bytes(*mlp->down) + (mlp->gate ? weight_bytes(*mlp->gate) : 0);
    });
}

qjit_status qjit_tp_mlp_traffic(const qjit_tp_mlp* mlp, int64_t m, qjit_tp_traffic* traffic) {
    return guarded([&] {
        require(mlp != nullptr, "mlp is NULL");
        require(traffic != nullptr, "traffic is NULL");
        require_row_count(m);
        *traffic = tp_mlp_traffic(*mlp, m);
    });
}

qjit_status qjit_tp_mlp_get_layer(qjit_tp_mlp* mlp, qjit_mlp_part part, qjit_linear** layer) {
    return guarded([&] {
        require(layer != nullptr, "layer (the output pointer) is NULL");
        *layer = nullptr;
        require(mlp != nullptr, "mlp is NULL");
        require(part == QJIT_MLP_UP || part == QJIT_MLP_GATE || part == QJIT_MLP_DOWN, "part is ", int(part),
                "; expected QJIT_MLP_UP, QJIT_MLP_GATE or QJIT_MLP_DOWN");
        require(part != QJIT_MLP_GATE || mlp->gate, "a GELU MLP has no gate");
        *layer = (part == QJIT_MLP_UP ? mlp->up : part == QJIT_MLP_GATE ? mlp->gate : mlp->down).get();
    });
}

qjit_status qjit_tp_mlp_save(const qjit_tp_mlp* mlp, const char* path) {
    return guarded([&] {
        require(mlp != nullptr, "mlp is NULL");
        require(path != nullptr && *path, "path is NULL or empty");
        save_tp_mlp(*mlp, path);
    });
}

qjit_status qjit_tp_mlp_load(qjit_context* context, const char* path, qjit_tp_mlp** out) {
    return made(out, [&] {
        require(context != nullptr, "context is NULL");
        require(path != nullptr && *path, "path is NULL or empty");
        return load_tp_mlp(context, path);
    });
}

qjit_status qjit_linear_get_column_order(const qjit_linear* layer, int32_t* order) {
    return guarded([&] {
        require(layer != nullptr, "layer is NULL");
        require(order != nullptr, "order is NULL");
        for (int64_t j = 0; j < layer->params.n; ++j)
            order[j] = layer->params.permuted_columns ? layer->params.column_order[size_t(j)] : int32_t(j);
    });
}

}  // extern "C"
