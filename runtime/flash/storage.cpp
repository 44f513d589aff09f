#include "runtime/flash/storage.hpp"
