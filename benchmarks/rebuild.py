"""How long a rebuild takes after the edits a developer makes (issue 13, item 4); figures in docs/build.md.

    python benchmarks/rebuild.py [--runs 3] [--keep]

Works on a temporary copy of the tracked files, built once first (untimed: a clean build), through
the path of ci/build.sh (pip, --no-build-isolation) but installing into a directory of the copy
(``--target``), never into the active environment. Each measured step is wall time from the edit to a
working import: the build and install (``pip install --no-build-isolation --no-deps --upgrade
--target``), then a fresh interpreter that imports op_plugin from there and calls what changed.

    (a) adding a forward/backward pair: the toy fixture's two registry entries appended
        (tests/fixtures/toy_op), its kernel file as csrc/kernels/toy_square_scale/; the import
        runs the pair forward and backward. Removed again after each run (an untimed rebuild).
    (b) editing one entry's check: block_attention_residuals' norm_eps message, alternately with and
        without an "(edited)" suffix; the import checks the error text.
    (c) a rebuild with nothing changed.

Reports the median of ``--runs`` runs of each, and per run the compile steps it ran (kernel objects
by our ninja file, binding objects by torch's). Timing on a loaded machine is indicative only: run it
on an idle one.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "toy_op"
CHECK_MESSAGE = '"norm_eps must be > 0 and finite, but got {norm_eps}"'

IMPORT_PAIR = """
import torch, op_plugin
x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
y = torch.ops.op_plugin.toy_square_scale(x, 3.0)
torch.testing.assert_close(y, 3.0 * x * x)
(g,) = torch.autograd.grad(y.sum(), x)
torch.testing.assert_close(g, 6.0 * x)
"""
IMPORT_CHECK = """
import sys, torch, op_plugin
x = [torch.randn(8, 16), torch.randn(8, 2, 16), torch.randn(16), torch.ones(16)]
try:
    op_plugin.block_attention_residuals(*x, norm_eps=0.0)
except RuntimeError as e:
    assert ("(edited)" in str(e)) == (sys.argv[1] == "edited"), str(e)
else:
    raise AssertionError("norm_eps=0 was accepted")
"""
IMPORT_ONLY = "import op_plugin; op_plugin.isa_level()"


def _copy_tracked(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)


class Tree:
    def __init__(self, path: Path) -> None:
        self.path, self.site = path, path / "site"

    def build(self) -> tuple[int, int]:
        """Builds and installs into site/; returns (kernel objects, binding objects) compiled."""
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps",
                            "--no-index", "--upgrade", "--target", str(self.site), "."], cwd=self.path,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"build failed:\n{(r.stdout + r.stderr)[-4000:]}")
        log = r.stdout + r.stderr
        return len(re.findall(r"CXX ", log)), len(re.findall(r"^\s*\[\d+/\d+\] c\+\+ ", log, re.M))

    def use(self, code: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(self.site)}
        env.pop("OP_PLUGIN_ROOT", None)
        subprocess.run([sys.executable, "-c", code, *args], cwd=self.site.parent.parent, env=env, check=True)

    def timed(self, code: str, *args: str) -> tuple[float, tuple[int, int]]:
        start = time.perf_counter()
        compiled = self.build()
        self.use(code, *args)
        return time.perf_counter() - start, compiled


def _add_pair(tree: Path) -> None:
    entries = (FIXTURE / "op_plugin_functions.yaml").read_text()
    entries = "".join(line for line in entries.splitlines(True) if not line.startswith("#"))  # the fixture's header
    with open(tree / "op_plugin_functions.yaml", "a") as f:
        f.write("\n" + entries)
    kernel = tree / "csrc" / "kernels" / "toy_square_scale"
    kernel.mkdir()
    shutil.copy(FIXTURE / "toy_square_scale_kernel.cpp", kernel)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the temporary tree (printed)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="op_plugin_rebuild."))
    try:
        tree = Tree(work / "src")
        _copy_tracked(tree.path)
        registry = tree.path / "op_plugin_functions.yaml"
        original = registry.read_text()
        assert original.count(CHECK_MESSAGE) == 1, f"{CHECK_MESSAGE} is not in the registry once"
        print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at the start; tree {tree.path}")
        start = time.perf_counter()
        tree.build()
        tree.use(IMPORT_ONLY)
        print(f"clean build (untimed step): {time.perf_counter() - start:.0f} s")

        results: dict[str, list[float]] = {"a": [], "b": [], "c": []}
        labels = {"a": "(a) add a forward/backward pair", "b": "(b) edit one entry's check",
                  "c": "(c) rebuild, nothing changed"}
        for run in range(args.runs):
            before = registry.read_text()
            _add_pair(tree.path)
            seconds, compiled = tree.timed(IMPORT_PAIR)
            results["a"].append(seconds)
            print(f"{labels['a']}, run {run + 1}: {seconds:.1f} s, load {os.getloadavg()[0]:.1f}; "
                  f"kernel objects {compiled[0]}, binding objects {compiled[1]}")
            registry.write_text(before)
            shutil.rmtree(tree.path / "csrc" / "kernels" / "toy_square_scale")
            tree.build()  # back to the built tree (untimed)

            # Even runs add the suffix, odd runs remove it again: every run is a real edit.
            edited = run % 2 == 0
            registry.write_text(original.replace(CHECK_MESSAGE, CHECK_MESSAGE[:-1] + ' (edited)"') if edited
                                else original)
            seconds, compiled = tree.timed(IMPORT_CHECK, "edited" if edited else "original")
            results["b"].append(seconds)
            print(f"{labels['b']}, run {run + 1} ({'add' if edited else 'remove'} '(edited)'): {seconds:.1f} s, "
                  f"load {os.getloadavg()[0]:.1f}; kernel objects {compiled[0]}, binding objects {compiled[1]}")

            seconds, compiled = tree.timed(IMPORT_ONLY)
            results["c"].append(seconds)
            print(f"{labels['c']}, run {run + 1}: {seconds:.1f} s; kernel objects {compiled[0]}, "
                  f"binding objects {compiled[1]}")
        print("median of", args.runs, "runs:")
        for key, label in labels.items():
            print(f"  {label}: {statistics.median(results[key]):.1f} s")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
