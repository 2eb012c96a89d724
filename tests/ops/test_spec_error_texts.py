"""The sources' error texts (SPEC §1.6, §1.7, §2.6, §2.7): each is raised by the condition it names.

SPEC_TEXTS is the one table: a row is (SPEC section, op, base call, change, text). The text is
SPEC's, with its placeholders (%s, %ld) filled in for the change ("…" marks where SPEC cuts the
device's message short). Each base call is valid; each change breaks exactly one rule, and the
call must then raise a RuntimeError whose message, after the "<op>: " prefix, starts with the
text (our messages may add the values after it), the same message in eager and in fake mode. A
message that merged several conditions ("cu_seqlens_q and cu_seqlens_kv must be provided ...")
does not start with the per-argument text SPEC gives, and a change that broke an earlier rule
would raise another text.

§3 (Floyd attention) and §4 (Block Attention Residuals) give status codes (161001, 161002,
561002) and describe conditions, but quote no message text, so they have no rows here.
"""
# ruff: noqa: E501 - SPEC's texts stay whole on their rows, so a grep for one finds its row
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import op_plugin

OPS = torch.ops.op_plugin
TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)


def _z(*shape, dtype=torch.float32):
    return torch.zeros(shape, dtype=dtype)


def _i32(*values):
    return torch.tensor(values, dtype=torch.int32)


# Valid calls: flash attention B=2, S1=5, S2=7, N1=4, N2=2, D=16 (TND: T1=5, T2=5, two sequences);
# swa BSH with head_num 4, D = Dv = 8 (TND: T1=5, T2=7).
BASES = {
    "flash_attn": ("flash_attn", dict(q=_z(2, 5, 4, 16), k=_z(2, 7, 2, 16), v=_z(2, 7, 2, 16))),
    "flash_attn TND": ("flash_attn", dict(q=_z(5, 4, 16), k=_z(5, 2, 16), v=_z(5, 2, 16), cu_seqlens_q=_i32(0, 3, 5),
                                          cu_seqlens_kv=_i32(0, 4, 5), layout_q="TND", layout_kv="TND",
                                          layout_out="TND")),
    "flash_attn_grad": ("flash_attn_grad", dict(q=_z(2, 5, 4, 16), k=_z(2, 7, 2, 16), v=_z(2, 7, 2, 16),
                                                dout=_z(2, 5, 4, 16), attn_out=_z(2, 5, 4, 16),
                                                softmax_lse=_z(2, 4, 5))),
    "flash_attn_grad TND": ("flash_attn_grad", dict(q=_z(5, 4, 16), k=_z(5, 2, 16), v=_z(5, 2, 16), dout=_z(5, 4, 16),
                                                    attn_out=_z(5, 4, 16), softmax_lse=_z(4, 5),
                                                    cu_seqlens_q=_i32(0, 3, 5), cu_seqlens_kv=_i32(0, 4, 5),
                                                    layout_q="TND", layout_kv="TND", layout_out="TND")),
    "flash_attn D64": ("flash_attn", dict(q=_z(2, 5, 4, 64), k=_z(2, 7, 2, 64), v=_z(2, 7, 2, 64))),  # strict-valid
    "flash_attn_grad D64": ("flash_attn_grad", dict(q=_z(2, 5, 4, 64), k=_z(2, 7, 2, 64), v=_z(2, 7, 2, 64),
                                                    dout=_z(2, 5, 4, 64), attn_out=_z(2, 5, 4, 64),
                                                    softmax_lse=_z(2, 4, 5))),
    "flash_attn_metadata": ("flash_attn_metadata", dict(num_heads_q=4, num_heads_kv=2, head_dim=16, batch_size=2)),
    "swa_forward": ("swa_forward", dict(query=_z(2, 5, 32), key=_z(2, 7, 16), value=_z(2, 7, 16), head_num=4,
                                        input_layout="BSH")),
    "swa_forward TND": ("swa_forward", dict(query=_z(5, 4, 8), key=_z(7, 2, 8), value=_z(7, 2, 8), head_num=4,
                                            input_layout="TND", actual_seq_qlen=[3, 5], actual_seq_kvlen=[4, 7])),
    "swa_backward": ("swa_backward", dict(query=_z(2, 5, 32), key=_z(2, 7, 16), value=_z(2, 7, 16), dy=_z(2, 5, 32),
                                          head_num=4, input_layout="BSH", softmax_max=_z(2, 4, 5, 8),
                                          softmax_sum=_z(2, 4, 5, 8), attention_in=_z(2, 5, 32))),
    "swa_backward TND": ("swa_backward", dict(query=_z(5, 4, 8), key=_z(7, 2, 8), value=_z(7, 2, 8), dy=_z(5, 4, 8),
                                              head_num=4, input_layout="TND", softmax_max=_z(5, 4, 8),
                                              softmax_sum=_z(5, 4, 8), attention_in=_z(5, 4, 8),
                                              actual_seq_qlen=[3, 5], actual_seq_kvlen=[4, 7])),
}
FA = ("flash_attn", "flash_attn_grad")
SWA = ("swa_forward", "swa_backward")
M = dict(attn_mask=TEMPLATE)


def _for(ops, section, change, text, variant="", strict=False):
    """Rows for each op of ``ops``, on the base call ``op`` or ``op variant``."""
    return [(section, f"{op} {variant}" if variant else op, change, text, strict) for op in ops]


SPEC_TEXTS = [
    # §1.6, the grad checker's messages (reused by the forward where the rule is the same)
    *_for(FA, "§1.6", dict(k=_z(2, 7, 2, 16, dtype=torch.float64)), "dtype of k must be the same as q"),
    *_for(FA, "§1.6", dict(v=_z(2, 7, 2, 16, dtype=torch.float16)), "dtype of v must be the same as q"),
    *_for(["flash_attn_grad"], "§1.6", dict(dout=_z(2, 5, 4, 16, dtype=torch.bfloat16)), "dtype of dout must be the same as q"),
    *_for(["flash_attn_grad"], "§1.6", dict(attn_out=_z(2, 5, 4, 16, dtype=torch.float64)),
          "dtype of attn_out must be the same as q"),
    *_for(FA, "§1.6", dict(mask_mode=1, **M), "mask_mode only supports 0, 3, 4, but got 1."),
    *_for(FA, "§1.6", dict(mask_mode=2), "mask_mode only supports 0, 3, 4, but got 2."),
    *_for(FA, "§1.6", dict(win_left=-2), "win_left must be -1 or >= 0…"),
    *_for(FA, "§1.6", dict(win_right=-3), "win_right must be -1 or >= 0…"),
    *_for(FA, "§1.6", dict(max_seqlen_q=-2), "max_seqlen_q must be -1 or >= 0…"),
    *_for(FA, "§1.6", dict(max_seqlen_kv=-5), "max_seqlen_kv must be -1 or >= 0…"),
    *_for(FA, "§1.6", dict(**M), "attn_mask must not be provided when mask_mode is 0."),
    *_for(FA, "§1.6", dict(win_left=3), "win_left must be -1 when mask_mode is 0…"),
    *_for(FA, "§1.6", dict(win_right=0), "win_right must be -1 when mask_mode is 0…"),
    *_for(FA, "§1.6", dict(mask_mode=3, win_left=2, **M), "win_left must be -1 when mask_mode is 3…"),
    *_for(FA, "§1.6", dict(mask_mode=3, win_right=1, **M), "win_right must be -1 when mask_mode is 3…"),
    *_for(FA, "§1.6", dict(mask_mode=3), "attn_mask must be provided when mask_mode is 3."),
    *_for(FA, "§1.6", dict(mask_mode=4, win_left=2, win_right=0), "attn_mask must be provided when mask_mode is 4."),
    *_for(FA, "§1.6", dict(mask_mode=4, win_left=-1, win_right=0, **M), "win_left must be >= 0 when mask_mode is 4",
          variant="D64", strict=True),
    *_for(FA, "§1.6", dict(mask_mode=4, win_left=3, win_right=-1, **M), "win_right must be >= 0 when mask_mode is 4",
          variant="D64", strict=True),
    *_for(FA, "§1.6", dict(mask_mode=3, attn_mask=_z(1, 2048, 2048, dtype=torch.int8)), "attn_mask must be 2D…"),
    *_for(FA, "§1.6", dict(mask_mode=3, attn_mask=_z(2048, 1024, dtype=torch.int8)), "attn_mask shape must be [2048, 2048]…"),
    *_for(FA, "§1.6", dict(layout_q="SBH", layout_kv="SBH", layout_out="SBH"), "layout_q only supports BSND, TND, BNSD…"),
    *_for(FA, "§1.6", dict(layout_kv="BNSD"), "layout_q(BSND), layout_kv(BNSD), layout_out(BSND) must be the same."),
    *_for(FA, "§1.6", dict(q=_z(2, 5, 64)), "q must be 4D when layout is BSND…"),
    *_for(FA, "§1.6", dict(k=_z(7, 2, 16)), "k must be 4D when layout is BSND…"),
    *_for(FA, "§1.6", dict(v=_z(1, 2, 7, 2, 16)), "v must be 4D when layout is BSND…"),
    *_for(["flash_attn_grad"], "§1.6", dict(dout=_z(2, 5, 64)), "dout must be 4D when layout is BSND…"),
    *_for(["flash_attn_grad"], "§1.6", dict(attn_out=_z(2, 5, 4, 16, 1)), "attn_out must be 4D when layout is BSND…"),
    *_for(FA, "§1.6", dict(q=_z(5, 4, 16, 1)), "q must be 3D when layout is TND…", variant="TND"),
    *_for(["flash_attn_grad"], "§1.6", dict(softmax_lse=_z(5, 4)), "softmax_lse must be 2D (N, T) when layout is TND",
          variant="TND"),
    *_for(["flash_attn_grad"], "§1.6", dict(softmax_lse=_z(1, 4, 5)), "softmax_lse must be 2D (N, T) when layout is TND",
          variant="TND"),
    *_for(FA, "§1.6", dict(v=_z(2, 7, 2, 32)), "D dim of v must not exceed D dim of q."),
    *_for(FA, "§1.6", dict(k=_z(2, 7, 3, 16), v=_z(2, 7, 3, 16)), "N dim of q must be divisible by N dim of k."),
    *_for(FA, "§1.6", dict(cu_seqlens_q=None), "cu_seqlens_q must be provided when layout is TND.", variant="TND"),
    *_for(FA, "§1.6", dict(cu_seqlens_kv=None), "cu_seqlens_kv must be provided when layout is TND.", variant="TND"),
    *_for(FA, "§1.6", dict(cu_seqlens_q=_i32(0, 5)), "cu_seqlens_q must not be provided when layout is not TND."),
    *_for(FA, "§1.6", dict(cu_seqlens_kv=_i32(0, 7)), "cu_seqlens_kv must not be provided when layout is not TND."),
    *_for(FA, "§1.6", dict(cu_seqlens_q=_i32(0, 3, 5).view(1, 3)), "cu_seqlens_q must be 1D…", variant="TND"),
    *_for(FA, "§1.6", dict(cu_seqlens_kv=_i32(0, 4, 5).view(3, 1)), "cu_seqlens_kv must be 1D…", variant="TND"),
    # §1.7
    ("§1.7", "flash_attn_metadata", dict(batch_size=None),
     "When seqused_q and cu_seqlens_q are not provided, batch_size must be provided", False),
    # §2.6, op-plugin 7.3.0's npu_fusion_attention(_grad) (head_num: the forward's text, used by both)
    *_for(SWA, "§2.6", dict(head_num=0), "head_num must > 0"),
    *_for(SWA, "§2.6", dict(query=_z(2, 5, 4, 8, 1)),
          "The shapes of the input query should be 3 or 4 dimensional, but got 5-dimensional"),
    *_for(SWA, "§2.6", dict(key=_z(2, 7)), "The shapes of the input key should be 3 or 4 dimensional, but got 2-dimensional"),
    *_for(SWA, "§2.6", dict(value=_z(2)), "The shapes of the input value should be 3 or 4 dimensional, but got 1-dimensional"),
    *_for(["swa_backward"], "§2.6", dict(dy=_z(2, 5, 32, 1, 1)),
          "The shapes of the input dy should be 3 or 4 dimensional, but got 5-dimensional"),
    *_for(SWA, "§2.6", dict(keep_prob=1.5), "The keep_prob value must be in range of (0, 1], but got 1.5"),
    *_for(SWA, "§2.6", dict(keep_prob=0.0), "The keep_prob value must be in range of (0, 1], but got 0.0"),
    *_for(SWA, "§2.6", dict(softmax_layout="NTD"), "only supported softmax_layout=TND"),
    *_for(SWA, "§2.6", dict(softmax_layout="TND"), "softmax_layout=TND only supported when input_layout_str=TND"),
    *_for(SWA, "§2.6", dict(actual_seq_kvlen=[7]),
          "the size of actual_seq_qlen and actual_seq_kvlen must be the same and cannot be empty.", variant="TND"),
    *_for(SWA, "§2.6", dict(actual_seq_qlen=None),
          "the size of actual_seq_qlen and actual_seq_kvlen must be the same and cannot be empty.", variant="TND"),
    *_for(SWA, "§2.6", dict(input_layout="BSDN"),
          "The input_layout should be BSH/SBH/BNSD/BSND/TND(case-insensitive), but got BSDN"),
    # §2.7, seed 004 (Decision 8: before every other sparse_mode check)
    *_for(SWA, "§2.7", dict(sparse_mode=2), "The sparse_mode value should be 0 or 4, but got 2"),
    *_for(SWA, "§2.7", dict(sparse_mode=9), "The sparse_mode value should be 0 or 4, but got 9"),
]

# SPEC texts that cannot be raised, and why: the sparse_mode range checks of 7.3.0 come after
# seed 004's 0-or-4 check (Decision 8), which rejects every value they would. Each row is
# (op, change, the text that cannot appear, the text raised instead).
SUPERSEDED = [
    *[(op, dict(sparse_mode=m), "The sparse_mode value must be in range of [0,5) or (5,8]",
       f"The sparse_mode value should be 0 or 4, but got {m}") for op in ("swa_forward TND", "swa_backward TND")
      for m in (5, 9, -1)],
    *[(op, dict(sparse_mode=m), "The sparse_mode value must be in range of [0,6]",
       f"The sparse_mode value should be 0 or 4, but got {m}") for op in SWA for m in (7, -1)],
]


def _call(base: str, change: dict):
    op, kwargs = BASES[base]
    kwargs = {**kwargs, **change}
    kwargs = {k: v for k, v in kwargs.items() if v is not None or k in change}
    return getattr(OPS, op).default, kwargs


def _message(fn, kwargs, fake: bool) -> str:
    if not fake:
        with pytest.raises(RuntimeError) as info:
            fn(**kwargs)
        return str(info.value)
    with FakeTensorMode() as mode:
        fake_kwargs = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        with pytest.raises(RuntimeError) as info:
            fn(**fake_kwargs)
    return str(info.value)


@pytest.mark.parametrize("base", sorted(BASES))
def test_the_base_calls_are_valid(base) -> None:
    fn, kwargs = _call(base, {})
    fn(**kwargs)
    if base.startswith("flash_attn") and base != "flash_attn_metadata" and not base.endswith("D64"):
        return  # D = 16 is not a device head dim; the strict rows use the D64 calls
    with op_plugin.strict():
        fn(**kwargs)


@pytest.mark.parametrize("section,base,change,text,strict", SPEC_TEXTS,
                         ids=[f"{r[0]}-{r[1]}-{r[3][:40]}" for r in SPEC_TEXTS])
def test_each_source_text_is_raised_by_its_condition(section, base, change, text, strict) -> None:
    fn, kwargs = _call(base, change)
    op = BASES[base][0]
    with op_plugin.strict(strict):
        eager = _message(fn, kwargs, fake=False)
        fake = _message(fn, kwargs, fake=True)
    assert eager == fake, f"eager and fake differ:\n  {eager}\n  {fake}"
    wanted = f"{op}: " + text.removesuffix("…")
    assert eager.startswith(wanted), f"SPEC {section}: {eager!r} does not start with {wanted!r}"
    if strict:  # a device limit: the same call passes outside strict mode
        fn(**kwargs)


@pytest.mark.parametrize("base,change,absent,raised", SUPERSEDED, ids=[f"{r[0]}-{r[1]}" for r in SUPERSEDED])
def test_superseded_texts_give_way_to_seed_004(base, change, absent, raised) -> None:
    fn, kwargs = _call(base, change)
    message = _message(fn, kwargs, fake=False)
    assert raised in message and absent not in message
    assert _message(fn, kwargs, fake=True) == message


def test_the_table_covers_every_op_with_source_texts() -> None:
    assert {BASES[r[1]][0] for r in SPEC_TEXTS} == {"flash_attn", "flash_attn_grad", "flash_attn_metadata",
                                                    "swa_forward", "swa_backward"}
