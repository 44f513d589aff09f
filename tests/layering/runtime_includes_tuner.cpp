// Must compile: the control for the probes beside it (a higher layer sees the layers below).
#include "tuner/tuning_db.hpp"
#include "format/quantized_matrix.hpp"
