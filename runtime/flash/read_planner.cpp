#include "runtime/flash/read_planner.hpp"
