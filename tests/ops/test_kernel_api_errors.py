"""The torch-free kernel API rejects bad arguments with the registry's texts, as the binding and the fake do.

Each case calls the op three ways with the same bad arguments: eagerly (the binding's checks),
under FakeTensorMode (the generated fake) and through the C API, <Kernel>GetWorkspaceSize over
opTensor descriptors (its generated <Kernel>CheckArguments), by ctypes from the extension that
links the kernel library. The binding and the fake prefix the message with the op name; the
kernel API reports the message alone, with OP_ERR_PARAM_INVALID.
"""
from __future__ import annotations

import ast
import ctypes
import os
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import op_plugin
from codegen import expr as E
from codegen.api import cpp
from codegen.parse import load_registry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGISTRY = {op.name: op for op in load_registry(os.path.join(ROOT, "op_plugin_functions.yaml")).ops}
LIB = ctypes.CDLL(op_plugin._C.__file__)
LIB.opGetLastErrorMessage.restype = ctypes.c_char_p
OP_ERR_PARAM_INVALID = 161002

_DTYPES = {torch.float32: 0, torch.float16: 1, torch.int8: 2, torch.int32: 3, torch.uint8: 4, torch.int64: 9,
           torch.float64: 11, torch.bool: 12, torch.bfloat16: 27}


class OpTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 8), ("strides", ctypes.c_int64 * 8)]


class OpIntArray(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(ctypes.c_int64)), ("size", ctypes.c_int64)]


def _descriptor(t: torch.Tensor, keep: list[Any], as_given: bool = False) -> Any:
    t = t if as_given else t.contiguous()
    keep.append(t)
    d = OpTensor(t.data_ptr(), _DTYPES[t.dtype], t.dim())
    for i in range(t.dim()):
        d.shape[i], d.strides[i] = t.size(i), t.stride(i)
    keep.append(d)
    return ctypes.byref(d)


def _default(text: str) -> Any:
    return ast.literal_eval({"True": "True", "False": "False", "None": "None"}.get(text, text))


def kernel_message(op_name: str, kwargs: dict[str, Any], outputs: tuple[torch.Tensor, ...] = (),
                   as_given: bool = False) -> tuple[int, str]:
    """Calls <Kernel>GetWorkspaceSize with ``kwargs`` (the rest at the schema's defaults) and
    ``outputs`` (default: any descriptor, for calls whose arguments are refused first); input
    descriptors of contiguous copies, or ``as_given`` with the tensors' own strides."""
    op = REGISTRY[op_name]
    defaults = {a.name: _default(a.default) for a in op.func.arguments.flat_all if a.default is not None}
    values = {**defaults, **kwargs}
    params = cpp.kernel_params(op.func, [o.name for o in op.outputs], [o.name for o in op.int_outputs],
                               random=op.random_when is not None)
    keep: list[Any] = []
    args: list[Any] = []
    given = iter(outputs)
    for p in params:
        if p.is_output:
            if p.kind == E.TENSOR:
                args.append(_descriptor(next(given, torch.zeros(1)), keep))
            else:
                args.append(ctypes.byref(ctypes.c_int64()))
            continue
        if p.kind == "rng":
            args.append(ctypes.c_uint64(0))
            continue
        v = values[p.name]
        base = E.base(p.kind)
        if v is None:
            args.append(None)
        elif base == E.TENSOR:
            args.append(_descriptor(v, keep, as_given))
        elif p.kind == E.INT:
            args.append(ctypes.c_int64(v))
        elif p.kind == E.FLOAT:
            args.append(ctypes.c_double(v))
        elif p.kind == E.BOOL:
            args.append(ctypes.c_bool(v))
        elif base == E.STR:
            args.append(ctypes.c_char_p(v.encode()))
        elif p.kind == E.INT + E.OPTIONAL:
            args.append(ctypes.byref(ctypes.c_int64(v)))
        elif p.kind == E.FLOAT + E.OPTIONAL:
            args.append(ctypes.byref(ctypes.c_double(v)))
        else:  # int[]
            array = (ctypes.c_int64 * len(v))(*v)
            keep.append(array)
            args.append(ctypes.byref(OpIntArray(array, len(v))))
    workspace, executor = ctypes.c_uint64(), ctypes.c_void_p()
    status = getattr(LIB, f"{op.kernel}GetWorkspaceSize")(*args, ctypes.byref(workspace), ctypes.byref(executor))
    if executor.value:
        LIB.opDestroyExecutor(executor)
    return status, LIB.opGetLastErrorMessage().decode()


def eager_and_fake_messages(op_name: str, kwargs: dict[str, Any]) -> tuple[str, str]:
    op = getattr(torch.ops.op_plugin, op_name)
    with pytest.raises(RuntimeError) as eager:
        op(**kwargs)
    with FakeTensorMode() as mode:
        fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        with pytest.raises(RuntimeError) as faked:
            op(**fake)
    return str(eager.value).splitlines()[0], str(faked.value).splitlines()[0]


def _qkv(*shape: int) -> dict[str, torch.Tensor]:
    return {"q": torch.randn(*shape), "k": torch.randn(*shape), "v": torch.randn(*shape)}


def _swa(**kw: Any) -> dict[str, Any]:
    return {"query": torch.randn(1, 2, 4, 8), "key": torch.randn(1, 2, 4, 8), "value": torch.randn(1, 2, 4, 8),
            "head_num": 2, "input_layout": "BNSD", **kw}


def _bar(**kw: Any) -> dict[str, Any]:
    return {"partial_block": torch.randn(3, 8), "block_res": torch.randn(3, 2, 8), "proj_weight": torch.randn(8),
            "norm_weight": torch.randn(8), **kw}


def _floyd(**kw: Any) -> dict[str, Any]:
    q = torch.randn(1, 1, 4, 4, 8)
    return {"query_ik": q, "key_ij": torch.randn(1, 1, 4, 5, 8), "value_ij": torch.randn(1, 1, 4, 5, 8),
            "key_jk": torch.randn(1, 1, 5, 4, 8), "value_jk": torch.randn(1, 1, 5, 4, 8), **kw}


CASES = {
    "flash_attn mask_mode": ("flash_attn", {**_qkv(1, 4, 2, 8), "mask_mode": 7}),
    "flash_attn layout": ("flash_attn", {**_qkv(1, 4, 2, 8), "layout_q": "SBH"}),
    "flash_attn rank (a let)": ("flash_attn", {**_qkv(4, 2, 8)}),
    "flash_attn non-finite scale": ("flash_attn", {**_qkv(1, 4, 2, 8), "softmax_scale": float("inf")}),
    "flash_attn_grad softmax_lse shape": ("flash_attn_grad", {
        **_qkv(1, 4, 2, 8), "dout": torch.randn(1, 4, 2, 8), "attn_out": torch.randn(1, 4, 2, 8),
        "softmax_lse": torch.randn(1, 2, 5)}),
    "flash_attn_metadata no batch": ("flash_attn_metadata", {"num_heads_q": 2, "num_heads_kv": 2, "head_dim": 8}),
    "swa_forward sparse_mode": ("swa_forward", _swa(sparse_mode=2)),
    "swa_forward keep_prob (a float)": ("swa_forward", _swa(keep_prob=1.5)),
    "swa_forward input_layout (upper)": ("swa_forward", _swa(input_layout="nchw")),
    "block_attention_residuals norm_eps": ("block_attention_residuals", _bar(norm_eps=0.0)),
    "block_attention_residuals dtypes": ("block_attention_residuals", _bar(norm_weight=torch.randn(8).double())),
    "fused_floyd_attention atten_mask (optional)": ("fused_floyd_attention",
                                                    _floyd(atten_mask=torch.zeros(1, 1, 4, 1, 4, dtype=torch.bool))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_api_raises_the_registry_text(case: str) -> None:
    op_name, kwargs = CASES[case]
    eager, fake = eager_and_fake_messages(op_name, kwargs)
    status, message = kernel_message(op_name, kwargs)
    assert status == OP_ERR_PARAM_INVALID
    assert eager == fake == f"{op_name}: {message}"


def test_strict_limits_hold_in_the_kernel_api_too() -> None:
    kwargs = {**_qkv(1, 4, 2, 8), "softmax_scale": 0.5}
    outputs = torch.ops.op_plugin.flash_attn(**kwargs)
    assert kernel_message("flash_attn", kwargs, outputs) == (0, "")  # D = 8 is fine on the CPU ...
    with op_plugin.strict():  # ... not on the device: one flag, the kernel library's
        eager, fake = eager_and_fake_messages("flash_attn", kwargs)
        status, message = kernel_message("flash_attn", kwargs, outputs)
    assert status == OP_ERR_PARAM_INVALID and eager == fake == f"flash_attn: {message}"
    assert "on the device" in message


def test_what_only_the_kernel_checks_keeps_its_own_text() -> None:
    # cu_seqlens contents: the registry checks the shapes, the kernel the values.
    kwargs = {**_qkv(6, 2, 8), "layout_q": "TND", "layout_kv": "TND", "layout_out": "TND",
              "cu_seqlens_q": torch.tensor([0, 4, 3], dtype=torch.int32),
              "cu_seqlens_kv": torch.tensor([0, 3, 6], dtype=torch.int32)}
    outputs = (torch.empty(6, 2, 8), torch.empty(1))
    status, message = kernel_message("flash_attn", kwargs, outputs)
    assert status == OP_ERR_PARAM_INVALID and message.startswith("cu_seqlens_q must be non-decreasing")
    with pytest.raises(RuntimeError, match="flash_attn: cu_seqlens_q must be non-decreasing"):
        torch.ops.op_plugin.flash_attn(**kwargs)


def test_strided_inputs_in_the_kernel_api() -> None:
    """flash_attn's q, k and v are `strided:` in the registry (and swa_forward's query, key, value):
    the kernel API takes them with any strides >= 0 and a contiguous last dimension, names that
    rule otherwise, and still requires every other input contiguous."""
    q = torch.randn(1, 4, 2, 11)[..., :8]  # rows of 11 elements
    kwargs = {"q": q, "k": q, "v": q, "softmax_scale": 0.5}
    outputs = torch.ops.op_plugin.flash_attn(**kwargs)
    assert kernel_message("flash_attn", kwargs, outputs, as_given=True) == (0, "")
    every_other = {**kwargs, "k": torch.randn(1, 4, 2, 16)[..., ::2]}
    assert kernel_message("flash_attn", every_other, outputs, as_given=True) == (
        OP_ERR_PARAM_INVALID, "k must have a contiguous last dimension, but has stride 2")
    swa = _swa()
    swa_outputs = torch.ops.op_plugin.swa_forward(**swa)[:4]
    swa["query"] = torch.randn(1, 2, 4, 11)[..., :8]
    assert kernel_message("swa_forward", swa, swa_outputs, as_given=True) == (0, "")
    swa["pse"] = torch.randn(1, 2, 4, 5)[..., :4]
    assert kernel_message("swa_forward", swa, swa_outputs, as_given=True) == (
        OP_ERR_PARAM_INVALID, "pse must be contiguous")
