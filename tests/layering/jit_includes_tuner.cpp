// Must not compile: code generators sit below the tuner (see tuner_includes_runtime.cpp).
#include "tuner/tuning_db.hpp"
