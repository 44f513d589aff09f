#include "tuner/tuning_problem.hpp"

#include "base/error.hpp"

namespace qjit {

int64_t batch_bucket(int64_t rows) {
    int64_t bucket = 1;
    while (bucket < rows && bucket < 64) bucket *= 2;
    return bucket;
}

std::string kernel_key(const TuningProblem& problem) {
    return concat(jit::kernel_family_name(problem.kernel), " K=", problem.kernel.format.k, " N=", problem.n,
                  " m=", problem.batch, " threads=", problem.threads);
}

}  // namespace qjit
