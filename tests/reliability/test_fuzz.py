"""Fuzzed calls (issue 7 item 1): malformed variants of a valid call of every op, the backward
ops called directly included, either raise a RuntimeError whose message names the op, or succeed
with the shapes the fake function predicts and finite outputs for finite inputs. A crash would
take the test process down.

The backward ops start from a real forward call's outputs; the fuzzer then also hands them
garbage statistics (softmax_lse, softmax_max/sum, inv_norm, probs: NaN, +-inf, +-1e4, random)
and mismatched outputs (attn_out of other values or shapes). Statistics that do not belong to
the inputs (garbage ones, or the forward's after q, k, a mask or the scale changed) may
legitimately give non-finite gradients (exp(s - lse) overflows for lse = -1e4, or for s = 1e4
against the forward's lse), so a backward call is checked for finite outputs only when nothing
but the incoming gradient or the forward output changed; the shape and no-crash checks stay.

A short run is here (settings below); `python tests/reliability/fuzz_long.py` runs the long one.
"""
from __future__ import annotations

import functools
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
        **_backward_base_calls(),
    }


# The backward arguments that can change without making the statistics inconsistent with the
# inputs: the incoming gradient and the forward output (it enters only through rowsum(dout * out)).
# A backward call with any other argument mutated is not checked for finite outputs.
KEEP_STATISTICS_VALID = {"dout", "attn_out", "dy", "attention_in", "grad_output", "attention_out",
                         "grad_hidden_states"}


@functools.lru_cache(maxsize=1)
def _backward_base_calls() -> dict[str, tuple[object, dict[str, object]]]:
    """Each backward op, called directly with the outputs of a real forward call (cached: the
    strategies call _base_calls() once per example)."""
    ops = torch.ops.op_plugin
    g = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=g)

    q, kv = randn(1, 6, 4, 16), randn(1, 9, 2, 16)
    fa = dict(mask_mode=3, attn_mask=TEMPLATE, softmax_scale=0.3)
    out, lse = ops.flash_attn.default(q, kv, kv, **fa, return_softmax_lse=True)
    t = randn(13, 4, 16)
    cu = torch.tensor([0, 5, 13], dtype=torch.int32)
    tnd = dict(cu_seqlens_q=cu, cu_seqlens_kv=cu, layout_q="TND", layout_kv="TND", layout_out="TND", mask_mode=4,
               attn_mask=TEMPLATE, win_left=3, win_right=0, seqused_q=torch.tensor([4, 8]))
    t_out, t_lse = ops.flash_attn.default(t, t, t, **tnd, return_softmax_lse=True)
    swa = dict(atten_mask=TEMPLATE, pre_tockens=3, next_tockens=0, sparse_mode=4)
    s_out, smax, ssum = ops.swa_forward.default(q, kv, kv, 4, "BSND", **swa, scale=0.3)[:3]
    floyd = [randn(1, 1, 8, 8, 16) for _ in range(5)]
    mask = torch.zeros(1, 1, 8, 1, 8, dtype=torch.bool)
    mask[..., -2:] = True
    f_max, f_sum, f_out = ops.fused_floyd_attention.default(*floyd, atten_mask=mask, scale_value=0.25)
    bar = dict(partial_block=randn(5, 32), block_res=randn(5, 3, 32), proj_weight=randn(32), norm_weight=torch.ones(32))
    _, inv_norm, probs = ops.block_attention_residuals.default(**bar)
    return {
        "flash_attn_grad": (ops.flash_attn_grad.default, dict(
            q=q, k=kv, v=kv, dout=randn(*out.shape), attn_out=out, softmax_lse=lse, **fa)),
        "flash_attn_grad_tnd": (ops.flash_attn_grad.default, dict(
            q=t, k=t, v=t, dout=randn(*t_out.shape), attn_out=t_out, softmax_lse=t_lse, **tnd)),
        "swa_backward": (ops.swa_backward.default, dict(
            query=q, key=kv, value=kv, dy=randn(*s_out.shape), head_num=4, input_layout="BSND", softmax_max=smax,
            softmax_sum=ssum, attention_in=s_out, scale_value=0.3, **swa)),
        "fused_floyd_attention_grad": (ops.fused_floyd_attention_grad.default, dict(
            grad_output=randn(*f_out.shape), query_ik=floyd[0], key_ij=floyd[1], value_ij=floyd[2], key_jk=floyd[3],
            value_jk=floyd[4], attention_out=f_out, softmax_max=f_max, softmax_sum=f_sum, atten_mask=mask,
            scale_value=0.25)),
        "block_attention_residuals_grad": (ops.block_attention_residuals_grad.default, dict(
            **bar, grad_hidden_states=randn(5, 32), inv_norm=inv_norm, probs=probs)),
    }


def _mutate_tensor(draw, x: torch.Tensor) -> torch.Tensor:
    kind = draw(st.sampled_from(["dtype", "rank", "size", "empty", "view", "nan", "huge", "garbage_int", "garbage"]))
    if kind == "garbage":  # other contents, same shape: a mismatched output, garbage statistics
        if not x.is_floating_point():
            return x
        fill = draw(st.sampled_from(["randn", "nan", "inf", "-inf", "1e4", "-1e4", "0"]))
        if fill == "randn":  # seeded by hypothesis, so that a failing example replays
            g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 16)))
            return (torch.randn(x.shape, generator=g) * 3).to(x.dtype)
        return torch.full_like(x, float(fill))
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
    """(op, kwargs, check_finite): check_finite is False when a backward call's statistics may no
    longer belong to its inputs."""
    op, kwargs = _base_calls()[name]
    kwargs = dict(kwargs)
    check_finite = True
    for _ in range(draw(st.integers(1, 2))):
        key = draw(st.sampled_from(sorted(kwargs)))
        check_finite &= name not in _backward_base_calls() or key in KEEP_STATISTICS_VALID
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
    return op, kwargs, check_finite


def check_one(op, kwargs: dict[str, object], check_finite: bool = True) -> str:
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
    if check_finite and inputs_finite and all(not isinstance(v, float) or abs(v) < 1e20 for v in kwargs.values()):
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


def _tensor_keys(kwargs: dict[str, object]) -> list[str]:
    return sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))


@pytest.mark.parametrize("name", list(_base_calls()))
def test_all_meta_call_gives_the_fake_shapes(name: str) -> None:
    # Every tensor on the meta device: the registered fake runs (as for torch's own ops on meta).
    op, kwargs = _base_calls()[name]
    eager = op(**kwargs)
    meta = op(**{k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
    for e, m in zip(eager if isinstance(eager, tuple) else (eager,), meta if isinstance(meta, tuple) else (meta,)):
        if isinstance(e, torch.Tensor):
            assert m.device.type == "meta" and m.shape == e.shape and m.dtype == e.dtype


# Torch's own ops refuse a call mixing meta and CPU tensors (torch.add: "Tensor on device meta is
# not on the expected device cpu!"; sdpa: "Expected query, key, and value to have the same device
# type"). The dispatcher sends such a call to the Meta kernel, which is the registered fake; the
# generated fakes check that every tensor argument is on one device (op_plugin._runtime._same_device).
@pytest.mark.parametrize("name", list(_base_calls()))
def test_meta_and_cpu_tensors_mixed_in_one_call_raise(name: str) -> None:
    op, kwargs = _base_calls()[name]
    for key in _tensor_keys(kwargs):
        with pytest.raises(RuntimeError, match="device"):
            op(**dict(kwargs, **{key: kwargs[key].to("meta")}))
