/* TODO: being written */
#include "backend.h"
