"""The op-plugin command line: output and exit status of each command."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# The registry's ops in order, read from the YAML itself (so adding an op changes no test here).
OPS = [entry["func"].split("(")[0] for entry in yaml.safe_load((ROOT / "op_plugin_functions.yaml").read_text())
       if isinstance(entry, dict) and "func" in entry]


def cli(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "OP_PLUGIN_ROOT"}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "op_plugin", *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=120)


def test_list() -> None:
    r = cli("list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines] == OPS
    assert all(line.split(maxsplit=1)[1].startswith(line.split()[0] + "(") for line in lines)


def test_show() -> None:
    r = cli("show", "flash_attn_grad")
    assert r.returncode == 0, r.stderr
    for piece in ("# `flash_attn_grad`", "flash_attn_grad(Tensor q, Tensor k, Tensor v, Tensor dout",
                  "| `softmax_scale` | `float` | `0.0` |", "## Errors", "softmax_lse must be {stats_dtype(q)}",
                  "D must be <= 192 on the device",
                  "The backward of [`flash_attn`](flash_attn.md)"):
        assert piece in r.stdout, piece
    r = cli("show", "no_such_op")
    assert r.returncode == 1 and "no op 'no_such_op'" in r.stderr and "swa_forward" in r.stderr


def test_check(tmp_path: Path) -> None:
    r = cli("check")
    assert r.returncode == 0 and r.stdout.strip() == f"op_plugin_functions.yaml: {len(OPS)} ops, no errors", r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("- func: f(Tensor x) -> Tensor\n  kernel: F\n- func: g(Tensor x) -> Tensor\n  kernel: G\n"
                   "  outputs: {result0: {like: y}}\n")
    r = cli("check", str(bad))
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"{bad}:1: f: outputs: no shape rule for return 'result0'",
                                     f"{bad}:5: g: outputs: result0: 'like: y' does not name a tensor argument"]


def test_gen(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    first, second = cli("gen", "--out", str(out)), cli("gen", "--out", str(out))
    assert first.returncode == 0 and second.returncode == 0, first.stderr
    files = len([p for p in out.rglob("*") if p.is_file() and p.name != "manifest.txt"])
    assert first.stdout.startswith(f"op-plugin gen: {len(OPS)} ops, {files} files written, 0 unchanged")
    assert second.stdout.startswith(f"op-plugin gen: {len(OPS)} ops, 0 files written, {files} unchanged")
    assert (out / "include" / "op_plugin" / "ops" / "swa_forward.h").is_file()


def test_registry_commands_outside_a_checkout(tmp_path: Path) -> None:
    # Away from a checkout the installed wheel's generator and registry serve (see
    # tests/packaging/test_installed_generator.py); OP_PLUGIN_ROOT still picks a checkout.
    r = cli("list", cwd=tmp_path)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == len(OPS), r.stderr
    r = cli("list", cwd=tmp_path, env={"OP_PLUGIN_ROOT": str(ROOT)})
    assert r.returncode == 0 and len(r.stdout.splitlines()) == len(OPS)


def test_doctor() -> None:
    r = cli("doctor", cwd=Path("/"))
    assert r.returncode == 0, r.stderr
    for field in ("torch ", "kernel library", "ISA level", "threads", "strict mode", "build flags", "ops "):
        assert field in r.stdout, field
    assert f"DTensor          strategies of {len(OPS)} ops registered (" in r.stdout


def test_bench_prints_the_ratio_table_and_plots(tmp_path: Path) -> None:
    png = tmp_path / "throughput.png"
    r = cli("bench", "swa", "--quick", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("swa ")]
    assert len(rows) == 12 and all(line.split()[-1] == "-" or "x" in line for line in rows)
    assert "vs flash_attn mask_mode 4" in r.stdout and "dropout costs" in r.stdout
    assert f"op-plugin bench: {png}: useful GFLOP/s at S = [256, 512, 1024]" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
