"""op_plugin.compat: code written for cann_ops_transformer and torch_npu runs on the CPU unchanged.

SEED_000_EXAMPLE is seed 000's complete BSND GQA example (§4.8) as written there, with only its
device strings changed from "npu" to "cpu"; SEED_004_CALLS are the swa_forward / swa_backward
calls seed 004 describes (its text shows the C++ of the renamed functions, not a Python call:
sparse_mode 0 or 4, the TND rule T > 16K -> sparse_mode 4, and TND's D = query.size(2), D2 =
value.size(2)), written as a torch_npu user would. Both run after op_plugin.compat.install(),
and their results are checked against the float64 references within the error budget.
"""
from __future__ import annotations

import sys
import warnings

import pytest
import torch
from op_test_utils import assert_within_budget
from op_plugin.reference import flash_attn_reference, swa_reference

import op_plugin
import op_plugin.compat
from op_plugin.compat import cann_ops_transformer as cot
from op_plugin.compat import torch_npu as tnpu

SEED_000_EXAMPLE = '''
import math
import torch
import torch_npu
import cann_ops_transformer

torch_npu.npu.set_device(0)

dtype = torch.float16
B = 2
S1 = 128
S2 = 128
N1 = 8
N2 = 2
D = 128
Dv = 128
scale = 1.0 / math.sqrt(D)

q = torch.randn(B, S1, N1, D, dtype=dtype, device="cpu")
k = torch.randn(B, S2, N2, D, dtype=dtype, device="cpu")
v = torch.randn(B, S2, N2, Dv, dtype=dtype, device="cpu")

metadata = cann_ops_transformer.flash_attn_metadata(
    N1, N2, D,
    batch_size=B,
    max_seqlen_q=S1,
    max_seqlen_kv=S2,
    mask_mode=0,
    win_left=-1,
    win_right=-1,
    layout_q="BSND",
    layout_kv="BSND",
    layout_out="BSND",
    is_grad_enabled=True,
)

attn_out, softmax_lse = cann_ops_transformer.flash_attn(
    q, k, v,
    metadata=metadata,
    softmax_scale=scale,
    mask_mode=0,
    win_left=-1,
    win_right=-1,
    max_seqlen_q=S1,
    max_seqlen_kv=S2,
    layout_q="BSND",
    layout_kv="BSND",
    layout_out="BSND",
    return_softmax_lse=True,
)

dout = torch.randn_like(attn_out)
dq, dk, dv = cann_ops_transformer.flash_attn_grad(
    q, k, v, dout, attn_out, softmax_lse,
    metadata=metadata,
    softmax_scale=scale,
    mask_mode=0,
    win_left=-1,
    win_right=-1,
    max_seqlen_q=S1,
    max_seqlen_kv=S2,
    layout_q="BSND",
    layout_kv="BSND",
    layout_out="BSND",
)

torch_npu.npu.synchronize()

assert dq.shape == q.shape
assert dk.shape == k.shape
assert dv.shape == v.shape
'''

SEED_004_CALLS = '''
import torch
import torch_npu

# BSND, sparse_mode 4: a band of pre_tockens keys before and next_tockens after the diagonal,
# aligned bottom-right; the mask is the 2048 x 2048 template.
B, N, S, D = 2, 8, 256, 64
query = torch.randn(B, S, N, D, dtype=torch.bfloat16, device="cpu")
key = torch.randn(B, S, N, D, dtype=torch.bfloat16, device="cpu")
value = torch.randn(B, S, N, D, dtype=torch.bfloat16, device="cpu")
atten_mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device="cpu"), diagonal=1)
scale = D ** -0.5
attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels = torch_npu.swa_forward(
    query, key, value, N, "BSND", atten_mask=atten_mask, scale=scale, pre_tockens=64, next_tockens=0,
    sparse_mode=4)
dy = torch.randn_like(attention_out)
dq, dk, dv, dpse, dsink = torch_npu.swa_backward(
    query, key, value, dy, N, "BSND", atten_mask=atten_mask, softmax_max=softmax_max,
    softmax_sum=softmax_sum, attention_in=attention_out, scale_value=scale, pre_tockens=64,
    next_tockens=0, seed=seed, offset=offset, numels=numels, sparse_mode=4)

# sparse_mode 0 without a mask: the whole matrix.
out0 = torch_npu.swa_forward(query, key, value, N, "BSND", scale=scale, sparse_mode=0)[0]

# TND with more than 16K tokens runs as sparse_mode 4 (seed 004); value's head dim D2 < D.
T, N_TND, D_TND, D2 = 128 * 129, 1, 32, 16
tnd_query = torch.randn(T, N_TND, D_TND, dtype=torch.float32, device="cpu")
tnd_key = torch.randn(T, N_TND, D_TND, dtype=torch.float32, device="cpu")
tnd_value = torch.randn(T, N_TND, D2, dtype=torch.float32, device="cpu")
seq = [129 * (i + 1) for i in range(128)]
tnd_out = torch_npu.swa_forward(tnd_query, tnd_key, tnd_value, N_TND, "TND", atten_mask=atten_mask,
                                scale=D_TND ** -0.5, pre_tockens=40, next_tockens=0, actual_seq_qlen=seq,
                                actual_seq_kvlen=seq, sparse_mode=0)[0]

# Any other sparse_mode is refused.
try:
    torch_npu.swa_forward(query, key, value, N, "BSND", atten_mask=atten_mask, sparse_mode=2)
    refused = None
except RuntimeError as e:
    refused = str(e)
'''


def _grads(fn, xs, grad):
    """fn's output and the gradients of ``xs`` for the incoming ``grad``."""
    leaves = [x.detach().requires_grad_(True) for x in xs]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return out.detach(), [x.grad for x in leaves]


@pytest.fixture
def installed():
    """install() for one test: the aliases it puts in sys.modules are taken out afterwards."""
    before = set(sys.modules)
    assert op_plugin.compat.install() == ["cann_ops_transformer", "torch_npu"]
    yield
    for name in set(sys.modules) - before:
        if name.split(".")[0] in op_plugin.compat.SURFACES:
            del sys.modules[name]


def test_seed_000_example_runs_as_written(installed) -> None:
    torch.manual_seed(0)
    ns: dict = {}
    exec(compile(SEED_000_EXAMPLE, "seed_000_example", "exec"), ns)  # noqa: S102
    q, k, v, dout, scale = ns["q"], ns["k"], ns["v"], ns["dout"], ns["scale"]
    assert ns["metadata"].dtype == torch.int32 and ns["softmax_lse"].shape == (2, 8, 128)
    ref_out, ref_grads = _grads(lambda *t: flash_attn_reference(*t, softmax_scale=scale)[0],
                                [x.double() for x in (q, k, v)], dout)
    same_out, same_grads = _grads(lambda *t: flash_attn_reference(*t, softmax_scale=scale, use_sdpa=True)[0],
                                  [q, k, v], dout)
    assert_within_budget(ns["attn_out"], same_out, ref_out, "attn_out")
    for name, ours, same, ref in zip(("dq", "dk", "dv"), (ns["dq"], ns["dk"], ns["dv"]), same_grads, ref_grads):
        assert ours.dtype == torch.float16
        assert_within_budget(ours, same, ref, name)


def test_seed_000_import_check(installed) -> None:
    # seed 000 §3.2: python3 -c "from cann_ops_transformer.ops import flash_attn_grad; print('ok')"
    from cann_ops_transformer.ops import flash_attn_grad
    from cann_ops_transformer.ops.attention.flash_attn_grad import MaskMode

    assert flash_attn_grad is op_plugin.flash_attn_grad and MaskMode is op_plugin.MaskMode
    import cann_ops_transformer

    assert cann_ops_transformer.block_attention_residuals_backward is op_plugin.block_attention_residuals_grad


def test_seed_004_calls_run_as_written(installed) -> None:
    torch.manual_seed(1)
    ns: dict = {}
    exec(compile(SEED_004_CALLS, "seed_004_calls", "exec"), ns)  # noqa: S102
    assert ns["refused"] is not None and ns["refused"].startswith(
        "swa_forward: The sparse_mode value should be 0 or 4, but got 2")
    q, k, v, dy, scale = ns["query"], ns["key"], ns["value"], ns["dy"], ns["scale"]
    opts = dict(atten_mask=ns["atten_mask"], scale=scale, pre_tockens=64, next_tockens=0, sparse_mode=4)
    ref_out, ref_grads = _grads(lambda *t: swa_reference(*t, 8, "BSND", **opts)[0], [x.double() for x in (q, k, v)], dy)
    same_out, same_grads = _grads(lambda *t: swa_reference(*t, 8, "BSND", **opts)[0], [q, k, v], dy)
    assert_within_budget(ns["attention_out"], same_out, ref_out, "attention_out")
    for name, ours, same, ref in zip(("dq", "dk", "dv"), (ns["dq"], ns["dk"], ns["dv"]), same_grads, ref_grads):
        assert_within_budget(ours, same, ref, name)
    assert (ns["seed"], ns["offset"], ns["numels"]) == (0, 0, 2 * 8 * 256 * 256)
    with torch.no_grad():
        dense = swa_reference(q.double(), k.double(), v.double(), 8, "BSND", scale=scale)[0]
        assert_within_budget(ns["out0"], swa_reference(q, k, v, 8, "BSND", scale=scale)[0], dense, "sparse_mode 0")
        tq, tk, tv = ns["tnd_query"], ns["tnd_key"], ns["tnd_value"]
        tnd = dict(atten_mask=ns["atten_mask"], scale=32 ** -0.5, pre_tockens=40, next_tockens=0,
                   actual_seq_qlen=ns["seq"], actual_seq_kvlen=ns["seq"], sparse_mode=0)
        ref = swa_reference(tq.double(), tk.double(), tv.double(), 1, "TND", **tnd)[0]  # applies T > 16K -> 4
        same = swa_reference(tq, tk, tv, 1, "TND", **tnd)[0]
        assert_within_budget(ns["tnd_out"], same, ref, "TND > 16K")
        banded = swa_reference(tq.double(), tk.double(), tv.double(), 1, "TND", **dict(tnd, sparse_mode=4))[0]
        assert torch.equal(ref, banded)  # the reference ran as sparse_mode 4, as the op must


def test_torch_npu_aliases_and_int_tensor_lengths() -> None:
    assert tnpu.npu_fused_floyd_attention is op_plugin.fused_floyd_attention
    assert tnpu.npu_fused_floyd_attention_backward is op_plugin.fused_floyd_attention_grad
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(12, 2, 16, generator=g) for _ in range(3))
    lists = dict(actual_seq_qlen=[5, 12], actual_seq_kvlen=[7, 12])
    tensors = {name: torch.tensor(value, dtype=dtype) for (name, value), dtype in
               zip(lists.items(), (torch.int32, torch.int64))}
    pairs = ((tnpu.npu_fusion_attention, tnpu.npu_fusion_attention_grad), (tnpu.swa_forward, tnpu.swa_backward))
    for fwd, bwd in pairs:
        want = op_plugin.swa_forward(q, k, v, 2, "TND", scale=0.25, **lists)
        got = fwd(q, k, v, 2, "TND", scale=0.25, **tensors)
        assert all(torch.equal(a, b) for a, b in zip(got[:3], want[:3])) and got[4:] == want[4:]
        stats = dict(softmax_max=want[1], softmax_sum=want[2], attention_in=want[0], scale_value=0.25)
        want_grads = op_plugin.swa_backward(q, k, v, want[0], 2, "TND", **stats, **lists)
        got_grads = bwd(q, k, v, want[0], 2, "TND", **stats, **tensors)
        assert all(torch.equal(a, b) for a, b in zip(got_grads, want_grads))
    with pytest.raises(TypeError, match="actual_seq_qlen must be a list of ints or a 1D int tensor, but got a 1D "
                                        "torch.float32 tensor"):
        tnpu.npu_fusion_attention(q, k, v, 2, "TND", actual_seq_qlen=torch.tensor([5.0, 12.0]),
                                  actual_seq_kvlen=[7, 12])
    with pytest.raises(RuntimeError, match="^swa_forward: The sparse_mode value should be 0 or 4, but got 3"):
        tnpu.npu_fusion_attention(q, k, v, 2, "TND", sparse_mode=3, **tensors)


def test_cann_ops_transformer_surface() -> None:
    assert cot.flash_attn is op_plugin.flash_attn and cot.ops.flash_attn is op_plugin.flash_attn
    assert cot.flash_attn_metadata is op_plugin.flash_attn_metadata
    assert cot.block_attention_residuals is op_plugin.block_attention_residuals
    assert cot.ops.attention.flash_attn.MaskMode is cot.MaskMode is op_plugin.MaskMode


def test_install_never_shadows_a_real_package(tmp_path, monkeypatch) -> None:
    real = tmp_path / "cann_ops_transformer"
    real.mkdir()
    (real / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    try:
        with pytest.warns(UserWarning, match="a real cann_ops_transformer is installed .* leaves it alone"):
            assert op_plugin.compat.install("cann_ops_transformer") == []
        import cann_ops_transformer

        assert cann_ops_transformer.REAL
        with pytest.warns(UserWarning, match="cann_ops_transformer is already imported .* left alone"):
            assert op_plugin.compat.install("cann_ops_transformer") == []
        assert op_plugin.compat.install("torch_npu") == ["torch_npu"]  # the other surface still installs
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert op_plugin.compat.install("torch_npu") == ["torch_npu"]  # twice: no warning
    finally:
        for name in set(sys.modules) - before:
            if name.split(".")[0] in op_plugin.compat.SURFACES:
                del sys.modules[name]
    with pytest.raises(ValueError, match="unknown surface 'torch_xla'"):
        op_plugin.compat.install("torch_xla")
