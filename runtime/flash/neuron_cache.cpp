#include "runtime/flash/neuron_cache.hpp"
