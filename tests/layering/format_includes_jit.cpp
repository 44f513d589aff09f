// Must not compile: formats sit below the code generators (see tuner_includes_runtime.cpp).
#include "jit/x86/cpu_kernel.hpp"
