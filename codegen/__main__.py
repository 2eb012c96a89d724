"""python -m codegen [--registry op_plugin_functions.yaml] [--out build/generated | --docs docs/ops] [--check]"""
from __future__ import annotations

import argparse
import sys
import time

from codegen.generate import generate, generate_docs
from codegen.parse import RegistryError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    parser.add_argument("--registry", default="op_plugin_functions.yaml")
    parser.add_argument("--out", default="build/generated")
    parser.add_argument("--namespace", default="op_plugin", help="torch namespace of the ops (torch.ops.NAMESPACE)")
    parser.add_argument("--extension", default="_C", help="name of the compiled Python module (PYBIND11_MODULE)")
    parser.add_argument("--docs", metavar="DIR", help="write the reference pages (docs/ops) instead of the code")
    parser.add_argument("--check", action="store_true", help="fail if generated files are stale; write nothing")
    parser.add_argument("--torch", metavar="VERSION", help="resolve the registry's torch: ranges for this torch "
                        "version (default: the installed torch)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        if args.docs:
            fm = generate_docs(args.registry, args.docs, check_only=args.check, namespace=args.namespace,
                               torch_version=args.torch)
            args.out = args.docs
        else:
            fm = generate(args.registry, args.out, check_only=args.check, namespace=args.namespace,
                          extension=args.extension, torch_version=args.torch)
    except RegistryError as e:
        print("\n".join(e.errors), file=sys.stderr)
        return 1
    seconds = time.perf_counter() - start
    if args.check:
        if fm.stale:
            print("stale generated files (run python -m codegen):\n  " + "\n  ".join(fm.stale), file=sys.stderr)
            return 1
        print(f"codegen: {len(fm.unchanged)} files up to date")
        return 0
    print(f"codegen: {fm.ops} ops, {len(fm.written)} written, {len(fm.unchanged)} unchanged in {args.out} "
          f"({seconds:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
