#include "runtime/flash/sparse_ffn.hpp"
