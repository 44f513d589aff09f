#include "runtime/flash/neuron_predictor.hpp"
