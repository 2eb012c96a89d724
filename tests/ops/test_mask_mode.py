"""MaskMode (seed 000 §4.3): mask_mode of flash_attn, flash_attn_grad and flash_attn_metadata
takes the IntEnum member, its int value, or the member's name as a string in any case.

The registry's `- enum: MaskMode` item generates the class (op_plugin.MaskMode), the wrappers'
conversion, the .pyi stub and the docs; the registered torch ops keep `int mask_mode`.
"""
from __future__ import annotations

import enum
import os
import re
from pathlib import Path

import pytest
import torch
from op_test_utils import raises_same_in_eager_and_fake
from torch._subclasses.fake_tensor import FakeTensorMode

import op_plugin
from op_plugin import MaskMode

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)
MEMBERS = "NO_MASK = 0, CAUSAL = 3, SLIDING_WINDOW = 4"


def test_the_enum_is_the_seed_s() -> None:
    assert issubclass(MaskMode, enum.IntEnum)
    assert [(m.name, m.value) for m in MaskMode] == [("NO_MASK", 0), ("CAUSAL", 3), ("SLIDING_WINDOW", 4)]
    assert MaskMode.CAUSAL == 3 and "MaskMode" in op_plugin.__all__


def _inputs():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 70, 4, 16, generator=g)
    kv = torch.randn(1, 97, 2, 16, generator=g)
    return q, kv, torch.randn(1, 97, 2, 16, generator=g), torch.randn(1, 70, 4, 16, generator=g)


SPELLINGS = {3: [MaskMode.CAUSAL, 3, "CAUSAL", "causal", "Causal"],
             4: [MaskMode.SLIDING_WINDOW, 4, "sliding_window", "Sliding_Window"],
             0: [MaskMode.NO_MASK, 0, "no_mask", "NO_MASK"]}


def _mask_kwargs(mode: int) -> dict:
    if mode == 0:
        return {}
    return dict(attn_mask=TEMPLATE, **(dict(win_left=5, win_right=2) if mode == 4 else {}))


@pytest.mark.parametrize("mode", sorted(SPELLINGS))
def test_every_spelling_gives_the_int_s_result(mode) -> None:
    q, k, v, dout = _inputs()
    kw = _mask_kwargs(mode)
    ref_out, ref_lse = op_plugin.flash_attn(q, k, v, mask_mode=mode, softmax_scale=0.25, return_softmax_lse=True, **kw)
    ref_grads = op_plugin.flash_attn_grad(q, k, v, dout, ref_out, ref_lse, mask_mode=mode, softmax_scale=0.25, **kw)
    ref_meta = op_plugin.flash_attn_metadata(4, 2, 16, batch_size=1, mask_mode=mode)
    for spelling in SPELLINGS[mode]:
        out, lse = op_plugin.flash_attn(q, k, v, mask_mode=spelling, softmax_scale=0.25, return_softmax_lse=True, **kw)
        assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse), spelling
        grads = op_plugin.flash_attn_grad(q, k, v, dout, out, lse, softmax_scale=0.25, mask_mode=spelling, **kw)
        assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads)), spelling
        assert torch.equal(op_plugin.flash_attn_metadata(4, 2, 16, batch_size=1, mask_mode=spelling), ref_meta)
    # positionally too (flash_attn has no '*': mask_mode is its 13th argument)
    args = [q, k, v, None, None, None, None, None, None, kw.get("attn_mask"), None, 0.25, SPELLINGS[mode][-1]]
    assert torch.equal(op_plugin.flash_attn(*args, **{k: x for k, x in kw.items() if k != "attn_mask"})[0], ref_out)


def test_autograd_with_a_name() -> None:
    q, k, v, dout = (t.double().requires_grad_() for t in _inputs())
    out, _ = op_plugin.flash_attn(q, k, v, mask_mode="causal", attn_mask=TEMPLATE, softmax_scale=0.25)
    out.backward(dout)
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    op_plugin.flash_attn(q, k, v, mask_mode=3, attn_mask=TEMPLATE, softmax_scale=0.25)[0].backward(dout)
    assert all(torch.equal(a, t.grad) for a, t in zip(grads, (q, k, v)))


@pytest.mark.parametrize("op", ["flash_attn", "flash_attn_grad", "flash_attn_metadata"])
@pytest.mark.parametrize("bad", ["casual", "", "3", "window"])
def test_a_bad_name_lists_the_members_in_eager_and_fake(op, bad) -> None:
    q, k, v, dout = _inputs()
    calls = {"flash_attn": lambda q, k, v, d: op_plugin.flash_attn(q, k, v, mask_mode=bad, attn_mask=TEMPLATE),
             "flash_attn_grad": lambda q, k, v, d: op_plugin.flash_attn_grad(
                 q, k, v, d, d, torch.zeros(1, 4, 70), mask_mode=bad, attn_mask=TEMPLATE),
             "flash_attn_metadata": lambda q, k, v, d: op_plugin.flash_attn_metadata(4, 2, 16, batch_size=1,
                                                                                      mask_mode=bad)}
    message = "^" + re.escape(f"{op}: mask_mode must be a MaskMode ({MEMBERS}), its int value or its name in "
                              f"any case, but got {bad!r}") + "$"
    with pytest.raises(ValueError, match=message):
        calls[op](q, k, v, dout)
    with FakeTensorMode() as mode:
        fakes = [mode.from_tensor(t) for t in (q, k, v, dout)]
        with pytest.raises(ValueError, match=message):
            calls[op](*fakes)


def test_an_int_outside_the_enum_gets_the_source_s_text() -> None:
    q, k, v, _ = _inputs()
    raises_same_in_eager_and_fake(lambda q, k, v, m: op_plugin.flash_attn(q, k, v, mask_mode=1, attn_mask=m),
                                  [q, k, v, TEMPLATE],
                                  re.escape("flash_attn: mask_mode only supports 0, 3, 4, but got 1."))
    message = "flash_attn_metadata: mask_mode only supports 0, 3, 4, but got 2."
    with pytest.raises(RuntimeError, match=re.escape(message)):
        op_plugin.flash_attn_metadata(4, 2, 16, batch_size=1, mask_mode=2)
    assert op_plugin.flash_attn_metadata(4, 2, 16, batch_size=1, mask_mode=None).numel() > 0  # optional there


def test_the_registered_op_keeps_int_mask_mode() -> None:
    q, k, v, _ = _inputs()
    assert "int mask_mode=0" in str(torch.ops.op_plugin.flash_attn.default._schema)
    with pytest.raises(RuntimeError, match="mask_mode"):
        torch.ops.op_plugin.flash_attn(q, k, v, mask_mode="causal", attn_mask=TEMPLATE)
    out = torch.ops.op_plugin.flash_attn(q, k, v, mask_mode=MaskMode.CAUSAL, attn_mask=TEMPLATE)[0]  # IntEnum: an int
    assert torch.equal(out, op_plugin.flash_attn(q, k, v, mask_mode="causal", attn_mask=TEMPLATE)[0])


def test_torch_compile_fullgraph_with_a_name() -> None:
    q, k, v, _ = _inputs()

    def f(q, k, v):
        return op_plugin.flash_attn(q, k, v, mask_mode="Sliding_Window", attn_mask=TEMPLATE, win_left=3, win_right=0)[0]

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    expected = op_plugin.flash_attn(q, k, v, mask_mode=4, attn_mask=TEMPLATE, win_left=3, win_right=0)[0]
    assert torch.equal(compiled(q, k, v), expected)


def test_stub_and_docs_list_the_members() -> None:
    stub = (Path(os.path.dirname(op_plugin.__file__)) / "_generated" / "ops.pyi").read_text()
    assert "class MaskMode(IntEnum):\n    NO_MASK = 0\n    CAUSAL = 3\n    SLIDING_WINDOW = 4\n" in stub
    assert "mask_mode: Union[MaskMode, int, str] = 0" in stub
    assert "mask_mode: Optional[Union[MaskMode, int, str]] = None" in stub  # flash_attn_metadata
    index = (ROOT / "docs" / "ops" / "index.md").read_text()
    assert "### MaskMode" in index and "| `CAUSAL` | 3 |" in index and "| `SLIDING_WINDOW` | 4 |" in index
    for op in ("flash_attn", "flash_attn_grad", "flash_attn_metadata"):
        page = (ROOT / "docs" / "ops" / f"{op}.md").read_text()
        assert "`mask_mode` takes a `MaskMode`: `NO_MASK` = 0, `CAUSAL` = 3, `SLIDING_WINDOW` = 4." in page, op
    assert MEMBERS in op_plugin.flash_attn.__doc__
