// The hardware probe: sane values, ISA flags that match /proc/cpuinfo, a stable fingerprint and
// caches that agree with sysfs.
#include <cpuid.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tuner/cpu_isa.hpp"
#include "tuner/hardware_probe.hpp"

namespace qjit {
namespace {

std::set<std::string> proc_cpuinfo_flags() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream words(line.substr(line.find(':') + 1));
        return {std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    }
    return {};
}

// The register state the OS saves (XCR0); 0 without OSXSAVE.
uint64_t os_xcr0() {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return 0;
    uint32_t lo, hi;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t(hi) << 32) | lo;
}

TEST(HardwareProbe, ValuesAreSaneAndConsistent) {
    const CpuInfo& info = probe_cpu();
    std::cout << "[ probe    ] " << describe(info) << "\n";
    EXPECT_FALSE(info.vendor.empty());
    EXPECT_EQ(info.vendor.size(), 12u);
    EXPECT_EQ(info.model_name, std::string(info.model_name.c_str()));  // no embedded NULs
    if (!info.model_name.empty()) {
        EXPECT_NE(info.model_name.front(), ' ');
        EXPECT_NE(info.model_name.back(), ' ');
    }
    EXPECT_GE(info.logical_cpus, 1u);
    EXPECT_GE(info.available_cpus, 1u);
    EXPECT_LE(info.available_cpus, info.logical_cpus);
    EXPECT_GE(info.physical_cores, 1u);
    EXPECT_LE(info.physical_cores, info.logical_cpus);

    ASSERT_TRUE(info.l1d.present());
    ASSERT_TRUE(info.l2.present());
    for (const CacheInfo* cache : {&info.l1d, &info.l2, &info.l3}) {
        if (!cache->present()) continue;
        EXPECT_EQ(cache->line_bytes, 64u);
        EXPECT_GE(cache->shared_by, 1u);
        EXPECT_LE(cache->shared_by, info.logical_cpus);
    }
    EXPECT_LT(info.l1d.size_bytes, info.l2.size_bytes);
    if (info.l3.present()) EXPECT_LT(info.l2.size_bytes, info.l3.size_bytes);
    EXPECT_LE(info.l1d.shared_by, info.l2.shared_by);

    EXPECT_TRUE(info.supports(QJIT_ISA_PORTABLE));
    EXPECT_TRUE(info.supports(info.best_isa));
    EXPECT_EQ(info.best_isa, best_isa_up_to(QJIT_ISA_AVX512_VNNI));
    for (int level = info.best_isa + 1; level <= QJIT_ISA_AVX512_VNNI; ++level)
        EXPECT_FALSE(info.supports(qjit_isa(level))) << isa_name(qjit_isa(level));

    const std::string line = describe(info);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    EXPECT_NE(line.find(info.fingerprint), std::string::npos);
    EXPECT_NE(line.find(isa_name(info.best_isa)), std::string::npos);
}

TEST(HardwareProbe, IsaFlagsAgreeWithProcCpuinfo) {
    const std::set<std::string> flags = proc_cpuinfo_flags();
    if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
    const uint64_t xcr0 = os_xcr0();
    const bool os_avx = (xcr0 & 0x6) == 0x6;      // XMM and YMM state
    const bool os_avx512 = (xcr0 & 0xE6) == 0xE6;  // plus opmask and ZMM state
    const std::vector<std::string> avx2 = {"avx2", "fma", "f16c"};
    const std::vector<std::string> avx512 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl"};
    struct Level {
        qjit_isa isa;
        std::vector<std::string> needs;
        bool os;
    };
    const Level levels[] = {
        {QJIT_ISA_AVX2, avx2, os_avx},
        {QJIT_ISA_AVX2_VNNI, {"avx2", "fma", "f16c", "avx_vnni"}, os_avx},
        {QJIT_ISA_AVX512, avx512, os_avx512},
        {QJIT_ISA_AVX512_VNNI, {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"}, os_avx512},
    };
    const CpuInfo& info = probe_cpu();
    for (const Level& level : levels) {
        bool all = true;
        for (const std::string& flag : level.needs) {
            const bool has = flags.count(flag) != 0;
            all = all && has;
            if (info.supports(level.isa))
                EXPECT_TRUE(has) << isa_name(level.isa) << " reported but /proc/cpuinfo lacks " << flag;
        }
        EXPECT_EQ(info.supports(level.isa), cpu_supports(level.isa));
        if (all && level.os) EXPECT_TRUE(info.supports(level.isa)) << isa_name(level.isa) << " not reported";
    }
}

TEST(HardwareProbe, ProbeIsCachedAndThreadSafe) {
    std::vector<const CpuInfo*> seen(8);
    std::vector<std::thread> threads;
    for (auto& slot : seen) threads.emplace_back([&slot] { slot = &probe_cpu(); });
    for (auto& t : threads) t.join();
    for (const CpuInfo* info : seen) EXPECT_EQ(info, &probe_cpu());
}

TEST(HardwareProbe, FingerprintIsStableAcrossCallsAndProcesses) {
    const std::string fingerprint = probe_cpu().fingerprint;
    EXPECT_FALSE(fingerprint.empty());
    EXPECT_LT(fingerprint.size(), 48u);
    EXPECT_EQ(fingerprint.find_first_of(" \t\n:"), std::string::npos);
    EXPECT_EQ(detect_cpu().fingerprint, fingerprint);
    EXPECT_EQ(hardware_fingerprint(probe_cpu()), fingerprint);

    // A child process probes afresh and sends its fingerprint back through a pipe.
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(fds[0]);
        const std::string mine = detect_cpu().fingerprint;
        const bool ok = write(fds[1], mine.data(), mine.size()) == ssize_t(mine.size());
        close(fds[1]);
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    std::string received;
    char buffer[256];
    for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) received.append(buffer, size_t(n));
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(received, fingerprint);
}

TEST(HardwareProbe, FingerprintChangesWithItsInputs) {
    const CpuInfo base = probe_cpu();
    const std::string fingerprint = hardware_fingerprint(base);
    auto changed = [&](auto edit) {
        CpuInfo other = base;
        edit(other);
        return hardware_fingerprint(other) != fingerprint;
    };
    // Another vendor than this machine's, whichever it is.
    EXPECT_TRUE(changed([](CpuInfo& c) { c.vendor = c.vendor == "AuthenticAMD" ? "GenuineIntel" : "AuthenticAMD"; }));
    EXPECT_TRUE(changed([](CpuInfo& c) { c.model_name += " v2"; }));
    EXPECT_TRUE(changed([](CpuInfo& c) {
        c.best_isa = c.best_isa == QJIT_ISA_PORTABLE ? QJIT_ISA_AVX2 : QJIT_ISA_PORTABLE;
    }));
    EXPECT_TRUE(changed([](CpuInfo& c) { c.l1d.size_bytes += 1024; }));
    EXPECT_TRUE(changed([](CpuInfo& c) { c.l2.size_bytes *= 2; }));
    EXPECT_TRUE(changed([](CpuInfo& c) { c.l3.size_bytes += 1 << 20; }));
    // What the fingerprint does not cover leaves it alone.
    EXPECT_FALSE(changed([](CpuInfo& c) { c.available_cpus += 1; }));
}

TEST(HardwareProbe, SysfsCrossCheckAgreesForL1dAndL2) {
    if (!std::filesystem::exists("/sys/devices/system/cpu/cpu0/cache/index0")) GTEST_SKIP() << "no sysfs caches";
    const CpuInfo& info = probe_cpu();
    ASSERT_TRUE(info.sysfs_caches);
    ASSERT_TRUE(info.l1d.sysfs_present());
    ASSERT_TRUE(info.l2.sysfs_present());
    EXPECT_EQ(info.l1d.sysfs_size_bytes, info.l1d.size_bytes);
    EXPECT_EQ(info.l2.sysfs_size_bytes, info.l2.size_bytes);
    EXPECT_TRUE(info.l1d.sysfs_agrees());
    EXPECT_TRUE(info.l2.sysfs_agrees());
    for (const CacheInfo* cache : {&info.l1d, &info.l2, &info.l3})
        if (cache->sysfs_present()) EXPECT_GE(cache->sysfs_shared_by, 1u);
    // L3 is only reported: hypervisors describe it oddly.
    std::cout << "[ probe    ] L3 cpuid " << info.l3.size_bytes << " B, sysfs " << info.l3.sysfs_size_bytes << " B\n";
}

}  // namespace
}  // namespace qjit
