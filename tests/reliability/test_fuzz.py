"""Fuzzed calls (issue 7 item 1): malformed variants of a valid call of every op either raise a
RuntimeError whose message names the op, or succeed with the shapes the fake function predicts
and finite outputs for finite inputs. A crash would take the test process down.

A short run is here (settings below); `python tests/reliability/fuzz_long.py` runs the long one.
"""
from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

import op_plugin  # noqa: F401

TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
EXAMPLES = int(os.environ.get("OP_PLUGIN_FUZZ_EXAMPLES", "60"))
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.bool]


def _base_calls() -> dict[str, tuple[object, dict[str, object]]]:
    """op -> (op overload, valid keyword arguments)."""
    q = torch.randn(1, 6, 4, 16)
    kv = torch.randn(1, 9, 2, 16)
    t = torch.randn(13, 4, 16)
    cu = torch.tensor([0, 5, 13], dtype=torch.int32)
    ops = torch.ops.op_plugin
    return {
        "block_attention_residuals": (ops.block_attention_residuals.default, dict(
            partial_block=torch.randn(5, 32), block_res=torch.randn(5, 3, 32), proj_weight=torch.randn(32),
            norm_weight=torch.ones(32))),
        "fused_floyd_attention": (ops.fused_floyd_attention.default, dict(
            query_ik=torch.randn(1, 1, 8, 8, 16), key_ij=torch.randn(1, 1, 8, 8, 16), value_ij=torch.randn(1, 1, 8, 8, 16),
            key_jk=torch.randn(1, 1, 8, 8, 16), value_jk=torch.randn(1, 1, 8, 8, 16), scale_value=0.25)),
        "flash_attn": (ops.flash_attn.default, dict(q=q, k=kv, v=kv, mask_mode=3, attn_mask=TEMPLATE, softmax_scale=0.3)),
        "flash_attn_tnd": (ops.flash_attn.default, dict(q=t, k=t, v=t, cu_seqlens_q=cu, cu_seqlens_kv=cu, layout_q="TND",
                                                         layout_kv="TND", layout_out="TND", mask_mode=4, attn_mask=TEMPLATE,
                                                         win_left=3, win_right=0, seqused_q=torch.tensor([4, 8]))),
        "swa_forward": (ops.swa_forward.default, dict(query=q, key=kv, value=kv, head_num=4, input_layout="BSND",
                                                      atten_mask=TEMPLATE, pre_tockens=3, next_tockens=0, sparse_mode=4)),
        "swa_tnd": (ops.swa_forward.default, dict(query=t, key=t, value=t, head_num=4, input_layout="TND",
                                                  actual_seq_qlen=[5, 13], actual_seq_kvlen=[5, 13])),
    }


def _mutate_tensor(draw, x: torch.Tensor) -> torch.Tensor:
    kind = draw(st.sampled_from(["dtype", "rank", "size", "empty", "view", "nan", "huge", "garbage_int"]))
    if kind == "dtype":
        return x.to(draw(st.sampled_from(DTYPES)))
    if kind == "rank":
        return x.unsqueeze(0) if draw(st.booleans()) or x.dim() == 0 else x.flatten()
    if kind == "size":
        if x.dim() == 0:
            return x
        d = draw(st.integers(0, x.dim() - 1))
        n = draw(st.integers(0, x.shape[d] + 3))
        shape = list(x.shape)
        shape[d] = n
        return torch.zeros(shape, dtype=x.dtype) if n > x.shape[d] else x.narrow(d, 0, n)
    if kind == "empty":
        return x[:0] if x.dim() else x
    if kind == "view":  # non-contiguous and expanded views of the same values
        return x.transpose(0, -1).contiguous().transpose(0, -1) if x.dim() > 1 else x.expand(2, *x.shape)[0]
    if kind == "nan":
        y = x.clone(memory_format=torch.contiguous_format)
        if y.is_floating_point() and y.numel():
            y.view(-1)[draw(st.integers(0, y.numel() - 1))] = float(draw(st.sampled_from(["nan", "inf", "-inf"])))
        return y
    if kind == "huge":
        return x * 1e30 if x.is_floating_point() else x
    # garbage contents of index tensors (cu_seqlens, seqused): negative, decreasing, too large
    return torch.tensor(draw(st.lists(st.integers(-5, 40), min_size=0, max_size=5)), dtype=x.dtype) if not x.is_floating_point() else x


@st.composite
def malformed_calls(draw, name: str):
    op, kwargs = _base_calls()[name]
    kwargs = dict(kwargs)
    for _ in range(draw(st.integers(1, 2))):
        key = draw(st.sampled_from(sorted(kwargs)))
        value = kwargs[key]
        if isinstance(value, torch.Tensor):
            kwargs[key] = _mutate_tensor(draw, value)
        elif isinstance(value, bool):
            kwargs[key] = not value
        elif isinstance(value, int):
            kwargs[key] = draw(st.sampled_from([-(2 ** 31), -7, -1, 0, 1, 3, 5, 2 ** 31 - 1, 2 ** 40]))
        elif isinstance(value, float):
            kwargs[key] = draw(st.sampled_from([0.0, -1.0, 1e-30, 1e30, float("nan"), float("inf")]))
        elif isinstance(value, str):
            kwargs[key] = draw(st.sampled_from(["", "tnd", "BSH", "SBH", "BNSD", "XYZ", "BSND"]))
        elif isinstance(value, list):
            kwargs[key] = draw(st.lists(st.integers(-3, 20), min_size=0, max_size=4))
    return op, kwargs


def check_one(op, kwargs: dict[str, object]) -> str:
    """'error' (a clear exception) or 'ok' (checked outputs); raises AssertionError otherwise."""
    try:
        out = op(**kwargs)
    except (RuntimeError, ValueError, TypeError, IndexError) as e:
        # a clear error, never a crash; the binding's and the kernel's errors name the op
        if isinstance(e, RuntimeError):
            assert op._opname in str(e) or "expected" in str(e).lower(), str(e)[:300]
        return "error"
    outs = out if isinstance(out, tuple) else (out,)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake_kwargs = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        try:
            fake = op(**fake_kwargs)
        except Exception as e:  # noqa: BLE001
            # contents (cu_seqlens values, NaN...) are only visible to the kernel; shapes are not
            raise AssertionError(f"eager accepted a call the fake refuses: {e}") from e
    fakes = fake if isinstance(fake, tuple) else (fake,)
    for o, f in zip(outs, fakes):
        if isinstance(o, torch.Tensor):
            assert o.shape == f.shape and o.dtype == f.dtype
    # finite, moderate inputs (1e30 may overflow the math itself, as in PyTorch) give finite outputs
    inputs_finite = all(bool(torch.isfinite(v).all()) and bool((v.abs() < 1e15).all()) for v in kwargs.values()
                        if isinstance(v, torch.Tensor) and v.is_floating_point())
    if inputs_finite and all(not isinstance(v, float) or abs(v) < 1e20 for v in kwargs.values()):
        for o in outs:
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel():
                finite = torch.isfinite(o) | torch.isposinf(o)  # lse +inf marks empty rows
                assert bool(finite.all()), f"non-finite output for finite inputs: {kwargs}"
    return "ok"


@pytest.mark.parametrize("name", list(_base_calls()))
def test_fuzzed_calls_raise_clear_errors_or_succeed(name: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(call=malformed_calls(name))
    def run(call) -> None:
        check_one(*call)

    run()
