"""Which DTensor strategies the ops get on meshes of 4 ranks (1-D and 2-D), in one process: torch's
fake process group makes no collective, so only the sharding propagation is observed (the
placements of the outputs), not values (tests/distributed/test_dtensor.py runs real ranks).

An even split keeps its placements, on a 2-D mesh too: batch on one dimension and GQA heads on the
other, although the 2 key heads do not divide by the 4 ranks of the whole mesh. A split that
would be ragged (2 key heads over 4 ranks) is refused, and DTensor redistributes. With torch's
public register_sharding alone (op_plugin._sharding's fallback for a torch without the internal
API), the 2-D case is refused as well: every split axis must divide by the whole mesh's size.

Each case runs in a subprocess: the fake process group and the strategies are global to a process.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, sys
import torch
import torch.distributed as dist
import op_plugin
from op_plugin import _sharding

exact = sys.argv[1] == "exact"
if not exact:  # register through the public API before the import hook would
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _sharding._RegisterAfterImport)]
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore
if not exact:
    _sharding.register_all(exact=False)

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)

def dtensor(shape, mesh, placements):
    # this rank's shard of an even split, without a collective
    local = list(shape)
    for mesh_dim, p in enumerate(placements):
        if isinstance(p, Shard):
            local[p.dim] //= mesh.size(mesh_dim)
    return DTensor.from_local(torch.randn(local), mesh, placements, run_check=False, shape=torch.Size(shape),
                              stride=torch.empty(shape).stride())

def flash(mesh, placements, n1, n2):
    q = dtensor([4, 6, n1, 16], mesh, placements)
    k, v = (dtensor([4, 7, n2, 16], mesh, placements) for _ in range(2))
    out, lse = op_plugin.flash_attn(q, k, v, return_softmax_lse=True)
    return [str(out.placements), str(lse.placements)]

mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
mesh1 = init_device_mesh("cpu", (4,))
print(json.dumps({
    "2-D: batch on dp, GQA heads on tp": flash(mesh2, [Shard(0), Shard(2)], 8, 2),
    "1-D: 2 key heads over 4 ranks": flash(mesh1, [Shard(2)], 8, 2),
    "1-D: 4 key heads over 4 ranks": flash(mesh1, [Shard(2)], 8, 4),
}))
dist.destroy_process_group()
"""


def placements(path: str) -> dict[str, list[str]]:
    run = subprocess.run([sys.executable, "-c", SCRIPT, path], check=False, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("path", ["exact", "public"])
def test_even_splits_keep_their_placements_and_ragged_ones_are_refused(path: str) -> None:
    got = placements(path)
    kept_2d = ["(Shard(dim=0), Shard(dim=2))", "(Shard(dim=0), Shard(dim=1))"]
    if path == "exact":
        assert got["2-D: batch on dp, GQA heads on tp"] == kept_2d
    else:  # 2 key heads do not divide by the whole mesh's 4 ranks: the heads are gathered
        assert got["2-D: batch on dp, GQA heads on tp"] != kept_2d
    assert got["1-D: 4 key heads over 4 ranks"] == ["(Shard(dim=2),)", "(Shard(dim=1),)"]
    # 8 query heads over 4 ranks with 2 key heads would pair a rank's 2 query heads with half a
    # key head: not offered, and DTensor gathers the heads first
    assert got["1-D: 2 key heads over 4 ranks"][0] != "(Shard(dim=2),)"
