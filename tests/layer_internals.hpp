// What the tests read inside a layer handle: the x86 JIT's executor when the layer runs on it.
#pragma once

#include "runtime/cpu/jit_layer.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit::test {

// The executor of the layer's x86 JIT backend; null when the portable path runs it.
inline const JitExecutor* jit_of(const qjit_linear& layer) {
    const auto* jit = dynamic_cast<const JitLayer*>(layer.cpu.get());
    return jit ? &jit->executor() : nullptr;
}

}  // namespace qjit::test
