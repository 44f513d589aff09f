#include "runtime/ffn/flash_layer_ffn.hpp"

#include "runtime/flash/flash_ffn.hpp"

namespace qjit {

int64_t FlashLayerFfn::inputs() const { return flash->header().d_model; }

void FlashLayerFfn::forward(const float* x, int64_t m, float* y) const { flash->forward(layer, x, m, y); }

}  // namespace qjit
