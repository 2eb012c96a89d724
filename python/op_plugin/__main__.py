"""The op-plugin command line: ``op-plugin demo``, ``op-plugin doctor``."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="op-plugin", description="op_plugin: CANN attention operators on the CPU")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="call every op forward and backward; compare with PyTorch; time both")
    sub.add_parser("doctor", help="torch version, kernel library, ISA level, threads, strict mode")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from op_plugin.demo import run

        return run()
    if args.command == "doctor":
        import torch

        import op_plugin
        from op_plugin import _build_info, _C

        print(f"torch            {torch.__version__} (built against {_build_info.TORCH_VERSION})")
        print(f"kernel library   {_C.kernel_library_version()}")
        print(f"ISA level        {_C.isa_level()}")
        print(f"threads          {torch.get_num_threads()}")
        print(f"strict mode      {bool(_C.strict_mode())}")
        print(f"build flags      {_C.build_flags()}")
        print(f"ops              {', '.join(op_plugin._op_names)}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
