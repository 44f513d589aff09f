#include "runtime/flash/flash_ffn.hpp"
