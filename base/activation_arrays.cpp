#include "base/activation_arrays.hpp"

#include <algorithm>

#include "base/activations.hpp"

namespace qjit {

namespace {

// The last few values go through a padded vector, so that each is computed as the full vectors
// compute theirs: every lane runs the same operations, so a value's result depends on neither its
// index nor the family's width.
// up = activation(gate) * up.
template <typename V, typename Activation>
[[gnu::always_inline]] inline void gated_lanes(float* up, const float* gate, int64_t count, Activation activation) {
    constexpr int kWidth = kLanes<V>;
    int64_t i = 0;
    for (; i + kWidth <= count; i += kWidth)
        store_lanes(up + i, activation(load_lanes<V>(gate + i)) * load_lanes<V>(up + i));
    if (i == count) return;
    float g[kWidth] = {}, u[kWidth] = {};
    std::copy(gate + i, gate + count, g);
    std::copy(up + i, up + count, u);
    store_lanes(u, activation(load_lanes<V>(g)) * load_lanes<V>(u));
    std::copy(u, u + (count - i), up + i);
}

template <typename V>
[[gnu::always_inline]] inline void swiglu_lanes(float* up, const float* gate, int64_t count) {
    gated_lanes<V>(up, gate, count, [](V v) [[gnu::always_inline]] { return silu(v); });
}
template <typename V>
[[gnu::always_inline]] inline void geglu_lanes(float* up, const float* gate, int64_t count) {
    gated_lanes<V>(up, gate, count, [](V v) [[gnu::always_inline]] { return gelu(v); });
}

void swiglu_portable(float* up, const float* gate, int64_t count) { swiglu_lanes<Floats4>(up, gate, count); }
QJIT_TARGET_AVX2 void swiglu_avx2(float* up, const float* gate, int64_t count) {
    swiglu_lanes<Floats8>(up, gate, count);
}
QJIT_TARGET_AVX512 void swiglu_avx512(float* up, const float* gate, int64_t count) {
    swiglu_lanes<Floats16>(up, gate, count);
}
void geglu_portable(float* up, const float* gate, int64_t count) { geglu_lanes<Floats4>(up, gate, count); }
QJIT_TARGET_AVX2 void geglu_avx2(float* up, const float* gate, int64_t count) {
    geglu_lanes<Floats8>(up, gate, count);
}
QJIT_TARGET_AVX512 void geglu_avx512(float* up, const float* gate, int64_t count) {
    geglu_lanes<Floats16>(up, gate, count);
}

constexpr PerFamily<void (*)(float*, const float*, int64_t)> kSwiglu{swiglu_portable, swiglu_avx2, swiglu_avx512};
constexpr PerFamily<void (*)(float*, const float*, int64_t)> kGeglu{geglu_portable, geglu_avx2, geglu_avx512};

}  // namespace

void swiglu_in_place(qjit_isa isa, float* up, const float* gate, int64_t count) {
    kSwiglu[simd_family(isa)](up, gate, count);
}

void geglu_in_place(qjit_isa isa, float* up, const float* gate, int64_t count) {
    kGeglu[simd_family(isa)](up, gate, count);
}

void gelu_in_place(float* up, int64_t count) {
    for (int64_t i = 0; i < count; ++i) up[i] = gelu(up[i]);
}

void relu_in_place(float* up, int64_t count) {
    for (int64_t i = 0; i < count; ++i) up[i] = std::max(0.0f, up[i]);
}

}  // namespace qjit
