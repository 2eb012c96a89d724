// Prints the ISA level the kernel library dispatches on here, OP_PLUGIN_ISA's cap applied.
// build_and_run.sh asks it once per requested level and runs the tests once per distinct level:
// a level the CPU lacks runs as a lower one, the same code again.
#include <cstdio>

#include "op_plugin/isa.h"

int main() {
  std::puts(op_plugin::isa_name(op_plugin::active_isa()));
  return 0;
}
