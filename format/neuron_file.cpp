#include "format/neuron_file.hpp"
