// Everything a kernel source needs from the runtime.
#pragma once
#include "op_plugin/executor.h"
#include "op_plugin/isa.h"
#include "op_plugin/parallel.h"
#include "op_plugin/status.h"
#include "op_plugin/tensor.h"
#include "op_plugin/workspace.h"
