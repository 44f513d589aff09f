#include "runtime/ffn/grouped_products.hpp"

#include "runtime/linear_layer.hpp"

namespace qjit {

void GroupedProducts::clear() {
    jit_group_.clear();
    other_group_.clear();
}

void GroupedProducts::add(int index, const qjit_linear& layer, const int32_t* rows, int64_t count, float* out) {
    if (count == 0) return;
    const BackendLayer* cpu = layer.cpu.get();
    auto& group = cpu->kind() == BackendKind::X86Jit ? jit_group_ : other_group_;
    group.push_back({index, cpu, rows, count, out});
}

void GroupedProducts::run(const float* x, int64_t k) const {
    for (const std::vector<GroupedRows>* group : {&jit_group_, &other_group_})
        if (!group->empty()) group->front().layer->run_grouped(*group, x, k);
}

}  // namespace qjit
