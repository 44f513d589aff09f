// Must not compile: quantizers sit below the file readers and writers (see tuner_includes_runtime.cpp).
#include "io/gguf_file.hpp"
