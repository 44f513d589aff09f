// What this x86-64 machine offers the kernels: vendor and model, instruction sets, caches and
// cores, read through CPUID (sysfs only as a cross-check), and a stable fingerprint of it all.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "qjit/qjit.h"

namespace qjit {

struct CacheInfo {
    uint64_t size_bytes = 0;       // from CPUID; 0: no such cache reported
    unsigned line_bytes = 0;       // from CPUID
    unsigned shared_by = 0;        // logical CPUs sharing it (CPUID, capped at the logical CPUs)
    uint64_t sysfs_size_bytes = 0; // from /sys/devices/system/cpu/cpu0/cache; 0: not there
    unsigned sysfs_shared_by = 0;  // logical CPUs in sysfs' shared_cpu_list; 0: not there

    bool present() const { return size_bytes != 0; }
    bool sysfs_present() const { return sysfs_size_bytes != 0; }
    // True when sysfs is missing or reports the same size as CPUID.
    bool sysfs_agrees() const { return !sysfs_present() || sysfs_size_bytes == size_bytes; }
};

struct CpuInfo {
    std::string vendor;      // CPUID leaf 0, e.g. "GenuineIntel", "AuthenticAMD"
    std::string model_name;  // CPUID leaves 0x80000002..4, trimmed
    int family = 0, model = 0, stepping = 0;  // display family and model

    // isa[level]: whether the CPU and the OS support that qjit_isa level (index 0, AUTO, unused).
    std::array<bool, QJIT_ISA_AVX512_VNNI + 1> isa{};
    qjit_isa best_isa = QJIT_ISA_PORTABLE;
    bool supports(qjit_isa level) const { return level > 0 && level < int(isa.size()) && isa[level]; }

    CacheInfo l1d, l2, l3;
    bool sysfs_caches = false;  // whether sysfs cache information was found at all

    unsigned logical_cpus = 1;    // online logical CPUs (std::thread::hardware_concurrency)
    unsigned available_cpus = 1;  // of those, in this process' affinity mask (sched_getaffinity)
    unsigned physical_cores = 1;  // distinct (package, core) ids in sysfs, else CPUID's SMT width

    std::string fingerprint;  // hardware_fingerprint(*this)
};

// Probes the CPU once (thread-safe) and returns the cached result.
const CpuInfo& probe_cpu();

// Probes the CPU afresh, without the cache.
CpuInfo detect_cpu();

// A short string, the same on every run on the same machine, that changes when the vendor, model
// name, best ISA or any cache size changes: "<vendor>-<best isa>-<16 hex digits>".
std::string hardware_fingerprint(const CpuInfo& info);

// One line for logs.
std::string describe(const CpuInfo& info);

}  // namespace qjit
