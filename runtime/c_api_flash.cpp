#include "qjit/qjit.h"
