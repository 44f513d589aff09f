// NVRTC, loaded at run time (libnvrtc.so.13, .12 or $QJIT_NVRTC_LIBRARY) so that libqjit has no
// link-time dependency on the CUDA toolkit. Compiles generated CUDA C++ to PTX and a cubin for one
// architecture, with a cache in memory and on disk keyed by source hash, architecture and NVRTC
// version.
#pragma once

#include <string>
#include <vector>

namespace qjit::cuda {

struct CompiledKernel {
    std::vector<char> cubin;  // loadable with cuModuleLoadData
    std::string ptx;          // the PTX NVRTC produced on the way (for the debug dump)
    std::string log;          // NVRTC's log (warnings); empty when silent
    double compile_ms = 0;    // 0 when it came from a cache
    bool from_cache = false;
};

// Whether NVRTC can be loaded here; `why` (if not null) gets the reason when it cannot.
bool nvrtc_available(std::string* why = nullptr);
// "13.0"; throws QJIT_ERROR_NO_DEVICE (with the dlopen error) when NVRTC cannot be loaded.
std::string nvrtc_version();

// The options compile_cuda passes to NVRTC for sm_<arch> (part of the cache key). No
// --use_fast_math: the kernels must round like the oracle's error bound assumes.
std::vector<std::string> nvrtc_options(int arch);

// Compiles `source` for sm_<arch> (80, 86, 89, 90, ...). `name` labels it in messages. Throws
// QJIT_ERROR_NO_DEVICE when NVRTC is missing and QJIT_ERROR_INTERNAL with NVRTC's log when the
// source does not compile (generated source failing to compile is qjit's bug).
CompiledKernel compile_cuda(const std::string& source, const std::string& name, int arch);

// compile_cuda behind the caches: memory first, then the disk directory (if not empty), then NVRTC,
// storing what it compiled in both. A cache file is "<hash of source, arch, NVRTC version and
// options>-sm<arch>.cubin": a header with a magic, the key and a CRC-32 of the payload; a file that
// is truncated, fails its checksum or belongs to another key is ignored and replaced. Files are
// written to a temporary name and renamed, so a crash never leaves a partial file under the real
// name. The disk holds only the cubin: a kernel read from disk has an empty ptx and log (the memory
// cache keeps them for kernels compiled in this process). A cache directory that cannot be created,
// read or written is skipped: it never fails a compile. Thread-safe; concurrent misses of one key
// may each compile it.
CompiledKernel compile_cuda_cached(const std::string& source, const std::string& name, int arch,
                                   const std::string& cache_dir);

// For tests: forgets the kernels cached in memory (the disk cache is untouched).
void clear_memory_cubin_cache();

// $QJIT_CUBIN_CACHE, else $XDG_CACHE_HOME/qjit/cubin, else ~/.cache/qjit/cubin; "" if none of
// those can be formed (no HOME). QJIT_CUBIN_CACHE="" disables the disk cache.
std::string default_cubin_cache_dir();

}  // namespace qjit::cuda
