// Kernel keys as qjit wrote them before every name started with the weight format's name, read
// into today's form, so that tuning databases written then still hit:
//   "gemm_q4g128_asym_i8_avx512vnni[_s32] K=4096 N=11008 m=1 threads=2"
//       -> "q4g128_asym[_s32]_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2"
//   "cuda_q4g128_asym_f16[_s32]_sm90 K=4096 N=11008 m=16" -> "q4g128_asym[_s32]_cuda_f16_sm90 K=..."
// The old CPU form named one group over the whole column by its rows rounded up to 32 (q4g4096):
// a group at least K rows long is "col" now.
#pragma once

#include <optional>
#include <string>

namespace qjit {

// Today's form of an old key; nothing when `key` is not in an old form (today's keys included).
std::optional<std::string> migrated_kernel_key(const std::string& key);

}  // namespace qjit
