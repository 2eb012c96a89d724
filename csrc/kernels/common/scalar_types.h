// Moved to the public kernel API: csrc/include/op_plugin/scalar_types.h.
#pragma once
#include "op_plugin/scalar_types.h"
