#include "tuner/gpu_properties.hpp"

#include "base/error.hpp"

namespace qjit {

std::string GpuProperties::fingerprint() const {
    constexpr int64_t kib = 1024, mib = 1024 * 1024;
    const std::string l2 = l2_bytes % mib == 0 ? concat(l2_bytes / mib, "M") : concat(l2_bytes / kib, "K");
    return concat(name, " sm_", arch(), " SMs=", sm_count, " smem=", shared_memory_per_sm / kib, "K L2=", l2,
                  " bus=", memory_bus_bits);
}

}  // namespace qjit
