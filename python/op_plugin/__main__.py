"""The op-plugin command line (also ``python -m op_plugin``).

    demo                  every op forward and backward against PyTorch (README's command 1)
    demo train            train a small Block-AttnRes transformer on op_plugin's ops and its plain PyTorch
                          twin side by side: loss curves (PNG), step-time ratio, peak memory
    doctor                torch, kernel library, ISA level, threads, build flags, strict mode
    list                  every op of the registry with its schema, one line each
    show OP               one op: schema, arguments, outputs, errors, device limits, autograd
    check [YAML]          validate a registry; every error as file:LINE; exit 1 on errors
    gen --out DIR         run the generator; files written and unchanged
    new NAME [--backward] scaffold an op (with --backward, a forward/backward pair): registry entries,
                          kernels on the generated stages, test
    test [OP ...]         the registry's generated tests of OP (every op with samples: by default):
                          reference in every dtype, fake shapes, opcheck, gradcheck, torch.compile, errors
    bench [FAMILY ...]    the benchmarks' ratio table (benchmarks/run.py); --plot FILE.png draws
                          throughput against sequence length for the attention ops

list, show, check, gen and new need no build: they use the generator (the codegen package, with its
templates) and the registry of the checkout at OP_PLUGIN_ROOT or around the working directory, else
those the installed wheel carries (op_plugin._checkout finds them). bench needs a checkout (benchmarks/).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from op_plugin._checkout import checkout_root, registry_path


def _import_codegen() -> None:
    """The generator is the ``codegen`` package: a checkout's (its root on sys.path, as ``python -m``
    run from the root puts it) or the installed wheel's."""
    try:
        import codegen  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "codegen":
            raise
        raise SystemExit("op-plugin: this command needs op_plugin's generator (the codegen package): install "
                         "op_plugin, or run it from the root of a checkout") from None


def _load(registry: str | None, torch_version: str | None = None):
    _import_codegen()
    from codegen.parse import RegistryError, load_registry

    path = registry or str(registry_path())
    try:
        return load_registry(path, registry or "op_plugin_functions.yaml", torch_version), None
    except RegistryError as e:
        return None, e.errors


def _doctor() -> int:
    import torch

    import op_plugin
    from op_plugin import _build_info, _C

    dtensor = _dtensor_status()  # first: its import flushes stdout, which `doctor | head` would have closed
    print(f"torch            {torch.__version__} (built against {_build_info.TORCH_VERSION})")
    print(f"kernel library   {_C.kernel_library_version()}")
    print(f"ISA level        {_C.isa_level()}")
    print(f"threads          {torch.get_num_threads()}")
    print(f"strict mode      {bool(_C.strict_mode())}")
    print(f"build flags      {_C.build_flags()}")
    print(f"ops              {', '.join(op_plugin._op_names)}")
    print(f"DTensor          {dtensor}")
    return 0


def _dtensor_status() -> str:
    """How the ops' sharding strategies are registered with DTensor (importing it registers them)."""
    import torch.distributed as dist

    if not dist.is_available():
        return "torch.distributed is not available in this torch"
    import torch.distributed.tensor  # noqa: F401  (the import hook registers the strategies)

    from op_plugin import _sharding
    how = ("even splits per mesh dimension" if _sharding._has_exact_filter()
           else "register_sharding, even splits over the whole mesh")
    return f"strategies of {len(_sharding._registered)} ops registered ({how})"


def _new(name: str, directory: str | None, namespace: str, backward: bool) -> int:
    """Writes a new op's registry entry (with --backward, its backward's too), kernels and test;
    each builds and runs as written (codegen/scaffold.py)."""
    _import_codegen()
    from codegen.file_manager import jinja_environment
    from codegen.scaffold import scaffold

    # Without --dir: into the checkout, or outside one into the working directory.
    target = Path(directory) if directory else (checkout_root() or Path.cwd())
    env = jinja_environment(namespace=namespace)
    try:
        written = scaffold(name, target, env, namespace, backward)
    except ValueError as e:
        print(f"op-plugin new: {e}", file=sys.stderr)
        return 1
    print(f"op-plugin new: {name}{' and ' + name + '_backward' if backward else ''}\n  {written[0]} (appended)\n  "
          + "\n  ".join(str(p) for p in written[1:])
          + f"\nnext: write the math where the files say TODO({name}), build (bash ci/build.sh), run the test")
    return 0


def _test(ops: list[str], registry: str | None, namespace: str, pytest_args: list[str]) -> int:
    """Generates the registry's tests (codegen/dest/tests.py) and runs those of ``ops`` (all without)."""
    import tempfile

    _import_codegen()
    from codegen.dest.tests import generate_tests

    registry_file = Path(registry) if registry else registry_path()
    # Beside the registry in a checkout (build/generated/tests); the wheel's registry gets a temporary directory.
    in_checkout = registry is not None or checkout_root() is not None
    out = registry_file.parent / "build" / "generated" if in_checkout else Path(tempfile.mkdtemp())
    _, generated = generate_tests(str(registry_file), str(out), namespace=namespace, display_path=registry_file.name)
    unknown = [op for op in ops if op not in generated]
    if unknown:
        print(f"op-plugin test: no generated tests for {', '.join(unknown)} (an op needs samples:, or its forward's); "
              f"ops with tests: {', '.join(generated)}", file=sys.stderr)
        return 1
    # References are imported by their dotted paths: installed (op_plugin.reference) or from the registry's
    # directory (a scaffolded op's tests.ops.test_NAME).
    sys.path.insert(0, str(registry_file.parent.resolve()))
    import pytest

    files = [str(out / "tests" / f"test_{op}.py") for op in (ops or generated)]
    return int(pytest.main([*files, "-q", "-p", "no:cacheprovider", *pytest_args]))


def _bench(families: list[str], quick: bool, plot_path: str | None) -> int:
    root = checkout_root()
    benchmarks = root / "benchmarks" if root else None
    if benchmarks is None or not (benchmarks / "run.py").is_file():
        raise SystemExit("op-plugin bench: the benchmarks are not installed with the wheel; run it from a checkout "
                         "or set OP_PLUGIN_ROOT")
    sys.path.insert(0, str(benchmarks))
    import run  # benchmarks/run.py

    status = run.main([*families, *(["--quick"] if quick else [])])
    if plot_path:
        import plot  # benchmarks/plot.py

        seq_lens = [256, 512, 1024] if quick else [512, 1024, 2048, 4096, 8192]
        series = plot.plot(plot_path, seq_lens)
        print(f"op-plugin bench: {plot_path}: useful GFLOP/s at S = {seq_lens}")
        for name, values in series.items():
            print(f"  {name:24} " + " ".join(f"{v:6.0f}" for v in values))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="op-plugin", description="op_plugin: CANN attention operators on the CPU",
                                     epilog="bench needs a checkout (or OP_PLUGIN_ROOT)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="call every op forward and backward; compare with PyTorch; time both "
                                    "('demo train': train a small transformer on the ops against plain PyTorch)")
    p.add_argument("what", nargs="?", choices=["train"], help="train: op_plugin.models.train (demo train --help)")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    sub.add_parser("doctor", help="torch version, kernel library, ISA level, threads, build flags, strict mode")
    p = sub.add_parser("list", help="every op with its schema")
    p.add_argument("--registry", help="a registry YAML (default: op_plugin_functions.yaml of the source tree)")
    p = sub.add_parser("show", help="one op: schema, arguments, outputs, errors, device limits, autograd")
    p.add_argument("op")
    p.add_argument("--registry")
    p = sub.add_parser("check", help="validate a registry; errors as file:LINE; exit status 1 on errors")
    p.add_argument("registry", nargs="?")
    p.add_argument("--torch", metavar="VERSION", help="resolve torch: ranges for this torch (default: the installed one)")
    p = sub.add_parser("gen", help="run the generator")
    p.add_argument("--out", required=True)
    p.add_argument("--registry")
    p.add_argument("--namespace", default="op_plugin")
    p.add_argument("--torch", metavar="VERSION", help="resolve torch: ranges for this torch (default: the installed one)")
    p = sub.add_parser("new", help="scaffold an op: registry entry, kernel source with both stage functions, test")
    p.add_argument("name")
    p.add_argument("--dir", help="the tree to add it to (default: the source tree); gets op_plugin_functions.yaml, "
                                 "csrc/kernels/NAME/ and tests/ops/")
    p.add_argument("--namespace", default="op_plugin", help="torch namespace the test calls (torch.ops.NAMESPACE)")
    p.add_argument("--backward", action="store_true", help="also NAME_backward, derived from NAME, with the "
                                                            "autograd: pairing and a gradient test")
    p = sub.add_parser("test", help="run the registry's generated tests of OP (default: every op with samples:)")
    p.add_argument("ops", nargs="*", metavar="OP")
    p.add_argument("--registry", help="a registry YAML (default: op_plugin_functions.yaml of the source tree)")
    p.add_argument("--namespace", default="op_plugin", help="torch namespace of the ops (torch.ops.NAMESPACE)")
    p.add_argument("-k", dest="select", help="pytest -k: only the tests whose names match")
    p = sub.add_parser("bench", help="run the benchmarks (ratios against PyTorch measured in the same run)")
    p.add_argument("families", nargs="*", help="benchmark families (default: all); see benchmarks/run.py")
    p.add_argument("--quick", action="store_true", help="small shapes, for a smoke run")
    p.add_argument("--plot", metavar="FILE.png", help="also draw throughput against sequence length (matplotlib)")
    args = parser.parse_args(argv)

    if args.command == "demo":
        if args.what == "train":
            from op_plugin.models.train import main as train

            return train(args.train_args)
        from op_plugin.demo import run

        return run()
    if args.command == "doctor":
        return _doctor()
    if args.command == "new":
        return _new(args.name, args.dir, args.namespace, args.backward)
    if args.command == "test":
        return _test(args.ops, args.registry, args.namespace, ["-k", args.select] if args.select else [])
    if args.command == "bench":
        return _bench(args.families, args.quick, args.plot)
    registry, errors = _load(args.registry, getattr(args, "torch", None))
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    if args.command == "check":
        print(f"{registry.path}: {len(registry.ops)} ops, no errors")
        return 0
    if args.command == "list":
        width = max(len(op.name) for op in registry.ops)
        for op in registry.ops:
            print(f"{op.name:{width}}  {op.func}")
        return 0
    if args.command == "show":
        from codegen.dest import docs
        from codegen.file_manager import jinja_environment

        by_name = {c["name"]: c for c in docs.contexts(registry)}
        if args.op not in by_name:
            print(f"op-plugin: no op {args.op!r} in {registry.path}; known: {', '.join(by_name)}", file=sys.stderr)
            return 1
        page = jinja_environment().get_template("op_doc.md.j2").render(header="", op=by_name[args.op])
        print(page.strip())
        return 0
    if args.command == "gen":
        from codegen.generate import generate

        start = time.perf_counter()
        fm = generate(args.registry or str(registry_path()), args.out,
                      display_path=registry.path, namespace=args.namespace, torch_version=args.torch)
        print(f"op-plugin gen: {len(registry.ops)} ops, {len(fm.written)} files written, {len(fm.unchanged)} unchanged "
              f"in {args.out} ({time.perf_counter() - start:.2f} s)")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
