// QJIT_SIMD_CLONES: a function compiled for AVX-512, AVX2 and baseline x86-64, the copy picked by
// the dynamic loader (GCC's target_clones, an ifunc). Sanitizer builds get the baseline copy only:
// the loader runs ifunc resolvers before the sanitizer's runtime is initialised, and an
// instrumented resolver then crashes the program before main.
#pragma once

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define QJIT_SANITIZED_BUILD 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define QJIT_SANITIZED_BUILD 1
#endif

#ifdef QJIT_SANITIZED_BUILD
#define QJIT_SIMD_CLONES
#else
#define QJIT_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
