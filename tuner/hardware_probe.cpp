#include "tuner/hardware_probe.hpp"
#include "base/error.hpp"

#include <sched.h>

#include <xbyak/xbyak_util.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "base/directory.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {

namespace {

using Xbyak::util::Cpu;

struct Regs {
    uint32_t eax, ebx, ecx, edx;
};

Regs cpuid(uint32_t leaf, uint32_t subleaf = 0) {
    uint32_t r[4] = {};
    Cpu::getCpuidEx(leaf, subleaf, r);
    return {r[0], r[1], r[2], r[3]};
}

uint32_t bits(uint32_t value, int lo, int hi) { return (value >> lo) & ((1u << (hi - lo + 1)) - 1); }

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\0' || std::isspace(static_cast<unsigned char>(s.back())))) s.pop_back();
    size_t start = 0;
    while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
    return s.substr(start);
}

std::string regs_text(std::initializer_list<uint32_t> regs) {
    std::string text;
    for (uint32_t r : regs)
        for (int i = 0; i < 4; ++i) text += char(r >> (8 * i));
    return text;
}

bool is_amd_like(const std::string& vendor) { return vendor == "AuthenticAMD" || vendor == "HygonGenuine"; }

// Caches from the deterministic cache parameters leaf: 4 on Intel, 0x8000001D on AMD (same layout).
void read_cpuid_caches(CpuInfo& info, unsigned logical_cpus) {
    uint32_t leaf = 0;
    if (is_amd_like(info.vendor)) {
        const bool topoext = cpuid(0x80000000).eax >= 0x8000001D && bits(cpuid(0x80000001).ecx, 22, 22);
        if (topoext) leaf = 0x8000001D;
    } else if (cpuid(0).eax >= 4) {
        leaf = 4;
    }
    if (leaf == 0) return;
    for (uint32_t i = 0; i < 16; ++i) {
        const Regs r = cpuid(leaf, i);
        const uint32_t type = bits(r.eax, 0, 4);  // 1 data, 2 instruction, 3 unified
        if (type == 0) break;
        if (type == 2) continue;
        const uint32_t level = bits(r.eax, 5, 7);
        CacheInfo* cache = level == 1 ? &info.l1d : level == 2 ? &info.l2 : level == 3 ? &info.l3 : nullptr;
        if (!cache) continue;
        cache->line_bytes = bits(r.ebx, 0, 11) + 1;
        cache->size_bytes = uint64_t(bits(r.ebx, 22, 31) + 1) * (bits(r.ebx, 12, 21) + 1) * cache->line_bytes *
                            (uint64_t(r.ecx) + 1);
        // CPUID gives the number of APIC ids reserved for sharers, an upper bound on a small VM.
        cache->shared_by = std::min(bits(r.eax, 14, 25) + 1, logical_cpus);
    }
}

// Logical CPUs per physical core according to CPUID (1 when it does not say).
unsigned cpuid_smt_width(const std::string& vendor) {
    if (is_amd_like(vendor)) {
        if (cpuid(0x80000000).eax >= 0x8000001E && bits(cpuid(0x80000001).ecx, 22, 22))
            return bits(cpuid(0x8000001E).ebx, 8, 15) + 1;
    } else if (cpuid(0).eax >= 0xB) {
        const Regs r = cpuid(0xB, 0);
        if (bits(r.ecx, 8, 15) == 1 && bits(r.ebx, 0, 15) > 0) return bits(r.ebx, 0, 15);
    }
    return 1;
}

std::string read_line(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return trim(line);
}

// "48K", "2048K", "1M" -> bytes.
uint64_t parse_size(const std::string& text) {
    char* end = nullptr;
    uint64_t value = std::strtoull(text.c_str(), &end, 10);
    switch (std::toupper(static_cast<unsigned char>(*end))) {
        case 'K': return value << 10;
        case 'M': return value << 20;
        case 'G': return value << 30;
        default: return value;
    }
}

// "0-3,8,10-11" -> 7.
unsigned count_cpu_list(const std::string& list) {
    unsigned count = 0;
    std::stringstream ss(list);
    std::string part;
    while (std::getline(ss, part, ',')) {
        unsigned lo = 0, hi = 0;
        const int n = std::sscanf(part.c_str(), "%u-%u", &lo, &hi);
        if (n == 1) count += 1;
        if (n == 2 && hi >= lo) count += hi - lo + 1;
    }
    return count;
}

void read_sysfs_caches(CpuInfo& info) {
    const std::filesystem::path base = "/sys/devices/system/cpu/cpu0/cache";
    for (int i = 0; i < 16; ++i) {
        const std::filesystem::path dir = base / ("index" + std::to_string(i));
        const std::string level = read_line(dir / "level");
        if (level.empty()) break;
        const std::string type = read_line(dir / "type");
        if (type == "Instruction") continue;
        CacheInfo* cache = level == "1" ? &info.l1d : level == "2" ? &info.l2 : level == "3" ? &info.l3 : nullptr;
        if (!cache) continue;
        cache->sysfs_size_bytes = parse_size(read_line(dir / "size"));
        cache->sysfs_shared_by = count_cpu_list(read_line(dir / "shared_cpu_list"));
        info.sysfs_caches = info.sysfs_caches || cache->sysfs_size_bytes != 0;
    }
}

// Distinct (package, core) pairs over the online CPUs in sysfs; 0 when sysfs says nothing.
unsigned sysfs_physical_cores() {
    std::set<std::pair<std::string, std::string>> cores;
    const std::filesystem::path cpus = "/sys/devices/system/cpu";
    for (const std::string& name : list_directory(cpus.string()).value_or(std::vector<std::string>{})) {
        if (name.size() < 4 || name.compare(0, 3, "cpu") != 0 || !std::isdigit(static_cast<unsigned char>(name[3])))
            continue;
        if (read_line(cpus / name / "online") == "0") continue;
        const std::string core = read_line(cpus / name / "topology/core_id");
        if (core.empty()) continue;
        cores.emplace(read_line(cpus / name / "topology/physical_package_id"), core);
    }
    return unsigned(cores.size());
}

std::string human_size(uint64_t bytes) {
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
    return std::to_string(bytes) + " B";
}

}  // namespace

CpuInfo detect_cpu() {
    CpuInfo info;
    const Regs leaf0 = cpuid(0);
    info.vendor = regs_text({leaf0.ebx, leaf0.edx, leaf0.ecx});
    if (cpuid(0x80000000).eax >= 0x80000004) {
        for (uint32_t leaf = 0x80000002; leaf <= 0x80000004; ++leaf) {
            const Regs r = cpuid(leaf);
            info.model_name += regs_text({r.eax, r.ebx, r.ecx, r.edx});
        }
        info.model_name = trim(info.model_name.c_str());  // stop at the first NUL
    }
    const Cpu cpu;
    info.family = cpu.displayFamily;
    info.model = cpu.displayModel;
    info.stepping = cpu.stepping;

    for (int level = QJIT_ISA_PORTABLE; level < int(info.isa.size()); ++level)
        info.isa[level] = cpu_supports(qjit_isa(level));
    info.best_isa = best_isa_up_to(QJIT_ISA_AVX512_VNNI);

    info.logical_cpus = std::max(1u, std::thread::hardware_concurrency());
    cpu_set_t mask;
    CPU_ZERO(&mask);
    info.available_cpus = sched_getaffinity(0, sizeof mask, &mask) == 0 ? unsigned(CPU_COUNT(&mask)) : info.logical_cpus;
    info.available_cpus = std::max(1u, info.available_cpus);
    const unsigned cores = sysfs_physical_cores();
    info.physical_cores = cores != 0 ? cores : std::max(1u, info.logical_cpus / cpuid_smt_width(info.vendor));
    info.physical_cores = std::min(info.physical_cores, info.logical_cpus);

    read_cpuid_caches(info, info.logical_cpus);
    read_sysfs_caches(info);
    info.fingerprint = hardware_fingerprint(info);
    return info;
}

const CpuInfo& probe_cpu() {
    static const CpuInfo info = detect_cpu();  // initialised once, thread-safe
    return info;
}

std::string hardware_fingerprint(const CpuInfo& info) {
    const std::string key = info.vendor + '|' + info.model_name + '|' + isa_name(info.best_isa) + '|' +
                            std::to_string(info.l1d.size_bytes) + '|' + std::to_string(info.l2.size_bytes) + '|' +
                            std::to_string(info.l3.size_bytes);
    uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a: the same on every run, unlike std::hash
    for (unsigned char c : key) hash = (hash ^ c) * 0x100000001b3ull;
    const std::string vendor = info.vendor == "GenuineIntel" ? "intel" : is_amd_like(info.vendor) ? "amd" : "x86";
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016" PRIx64, hash);
    return vendor + '-' + isa_name(info.best_isa) + '-' + hex;
}

std::string describe(const CpuInfo& info) {
    TextStream out;
    out << info.vendor << " \"" << info.model_name << "\" family " << info.family << " model " << info.model
        << ", ISA " << isa_name(info.best_isa) << " [";
    const char* sep = "";
    for (int level = QJIT_ISA_PORTABLE; level < int(info.isa.size()); ++level)
        if (info.isa[level]) out << std::exchange(sep, " ") << isa_name(qjit_isa(level));
    out << "]";
    const std::pair<const char*, const CacheInfo*> caches[] = {{"L1d", &info.l1d}, {"L2", &info.l2}, {"L3", &info.l3}};
    for (const auto& [name, cache] : caches) {
        out << ", " << name << ' ' << (cache->present() ? human_size(cache->size_bytes) : "none");
        if (cache->present()) out << " (line " << cache->line_bytes << " B, shared by " << cache->shared_by;
        if (cache->sysfs_present())
            out << (cache->sysfs_agrees() ? ", sysfs agrees" : ", sysfs says " + human_size(cache->sysfs_size_bytes));
        if (cache->present()) out << ')';
    }
    if (!info.sysfs_caches) out << ", no sysfs caches";
    out << ", " << info.logical_cpus << " logical CPUs (" << info.available_cpus << " available), "
        << info.physical_cores << " physical cores, fingerprint " << info.fingerprint;
    return out.str();
}

}  // namespace qjit
