#include "runtime/flash/read_tuning.hpp"
