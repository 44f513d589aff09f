// Must not compile: the tuner sits below the runtime, so it cannot see runtime headers
// (tests/CMakeLists.txt builds this in the tuner layer and expects the include to fail).
#include "runtime/context.hpp"
