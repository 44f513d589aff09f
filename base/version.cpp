// qjit_version(), defined at the bottom of the library: the tuning database stamps its records with it.
#include "qjit/qjit.h"

#define QJIT_STRINGIFY_(x) #x
#define QJIT_STRINGIFY(x) QJIT_STRINGIFY_(x)

extern "C" const char* qjit_version(void) {
    return QJIT_STRINGIFY(QJIT_VERSION_MAJOR) "." QJIT_STRINGIFY(QJIT_VERSION_MINOR) "." QJIT_STRINGIFY(
        QJIT_VERSION_PATCH);
}
