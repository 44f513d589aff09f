// What the tuner knows of a CUDA device: the driver (runtime/cuda/cuda_driver.hpp) probes it, the
// GPU search space and the tuning database's fingerprint read it.
#pragma once

#include <cstdint>
#include <string>

namespace qjit {

// What the probe and the tuner need to know about a device.
struct GpuProperties {
    int ordinal = 0;
    std::string name;
    int compute_major = 0, compute_minor = 0;
    int sm_count = 0;
    int64_t shared_memory_per_sm = 0;
    int64_t shared_memory_per_block_optin = 0;  // the most dynamic shared memory a block may ask for
    int64_t l2_bytes = 0;
    int64_t global_memory_bytes = 0;
    int memory_bus_bits = 0;
    int memory_clock_khz = 0;
    int driver_version = 0;

    int arch() const { return compute_major * 10 + compute_minor; }  // 90 for sm_90
    double peak_bandwidth_gbps() const { return 2.0 * memory_bus_bits / 8 * memory_clock_khz * 1e3 / 1e9; }
    // "NVIDIA H100 80GB HBM3 sm_90 SMs=132 smem=228K L2=50M bus=5120" (the tuning database's fingerprint).
    std::string fingerprint() const;
};

}  // namespace qjit
