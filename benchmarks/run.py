"""python benchmarks/run.py [--quick] [family ...]: prints the ratio table of every benchmark.

Each row: the median time of the op_plugin op and of the PyTorch baseline measured in the same
run, their ratio, the throughput against the machine's measured peak, and peak extra memory.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

if "--no-thp" not in sys.argv:
    # Large outputs (a 1.2 GB gradient) are fresh memory every step; with 4 KB pages the
    # first touch of it costs more than the kernel. torch's allocator backs large blocks with
    # transparent huge pages when this is set before it starts; both sides of every ratio run
    # under the same setting.
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch  # noqa: E402

FAMILIES = ["block_attention_residuals", "fused_floyd_attention", "flash_attn", "flash_attn_peers", "paged", "swa",
            "ring_attention", "dtensor", "train", "overhead", "vmap"]

KNOWN_KEYS = {"workload", "dtype", "op_plugin_s", "pytorch_s", "speedup", "throughput", "peak_extra_mb"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("families", nargs="*", default=FAMILIES)
    parser.add_argument("--quick", action="store_true", help="small shapes, for a smoke run")
    parser.add_argument("--no-thp", action="store_true", help="4 KB pages for large tensors (THP_MEM_ALLOC_ENABLE unset)")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import op_plugin

    thp = os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, ISA {op_plugin.isa_level()}, "
          f"huge pages for large tensors: {'on' if thp else 'off'}")
    from common import cpu_model, host_state

    dtype = torch.bfloat16 if op_plugin.isa_level() in ("avx512_amx", "avx512_bf16") else torch.float32
    print(f"CPU {cpu_model()}; host at the start: {host_state(dtype)}")
    header = f"{'workload':52} {'dtype':9} {'op_plugin':>10} {'PyTorch':>10} {'ratio':>7}  throughput; peak extra MB"
    print(header)
    for family in args.families:
        module = importlib.import_module(f"bench_{family}")
        for row in module.run(quick=args.quick):
            ours = f"{row['op_plugin_s'] * 1e3:8.1f}ms" if row['op_plugin_s'] == row['op_plugin_s'] else f"{'-':>10}"
            theirs = (f"{row['pytorch_s'] * 1e3:8.1f}ms {row['speedup']:6.2f}x"  # NaN: no baseline in this row
                      if row['speedup'] == row['speedup'] else f"{'-':>10} {'-':>7}")
            extras = "".join(f"; {key.replace('_', ' ')}: {value}" for key, value in row.items() if key not in KNOWN_KEYS)
            print(f"{row['workload']:52} {row['dtype']:9} {ours} {theirs}  {row['throughput']}; {row['peak_extra_mb']}"
                  f"{extras}")
    print(f"host at the end: {host_state(dtype)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
