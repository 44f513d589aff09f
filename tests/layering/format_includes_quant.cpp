// Must not compile: formats sit below the quantizers (see tuner_includes_runtime.cpp).
#include "quant/quantize_rtn.hpp"
