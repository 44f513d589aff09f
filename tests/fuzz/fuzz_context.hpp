// The context a fuzz target makes layers on: one thread, no tuning database, untimed tilings, and
// the instruction sets capped at `max_isa` (the portable path, or AVX2, which every machine the
// fuzzers run on has), so that no input waits on a timed search.
#pragma once

#include "qjit/qjit.h"

inline qjit_context* make_fuzz_context(qjit_isa max_isa) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = 1;
    options.max_isa = max_isa;
    options.tuning_db_path = "";
    options.tuning_budget_ms = 0;
    qjit_context* made = nullptr;
    qjit_context_create(&options, &made);
    return made;
}
