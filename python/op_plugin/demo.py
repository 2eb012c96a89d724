"""``op-plugin demo``: every op forward and backward, its agreement with PyTorch, its speed.

Each registered forward op is called through autograd (so its backward op runs too), compared
with the float64 composite PyTorch reference of op_plugin.reference, and timed against the
same-dtype composite with autograd, medians of three runs measured in the same process.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

import op_plugin
from op_plugin import reference
from op_plugin.timing import median_seconds


@dataclass(frozen=True)
class DemoCase:
    forward: str  # the registered forward op; its backward runs through autograd
    backward: str
    description: str
    make_inputs: Callable[[torch.dtype], list[torch.Tensor]]
    ours: Callable[..., torch.Tensor]
    composite: Callable[..., torch.Tensor]


def _bar_inputs(dtype: torch.dtype, T: int = 2048, N: int = 8, H: int = 1024) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(T, H), (T, N, H), (H,), (H,)]
    xs = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    xs[2] = xs[2] / H ** 0.5
    xs[3] = 1 + 0.1 * xs[3]
    return [x.to(dtype).requires_grad_(True) for x in xs]


def _floyd_inputs(dtype: torch.dtype, B: int = 1, H: int = 2, N: int = 64, D: int = 32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(B, H, N, N, D), (B, H, N, N, D), (B, H, N, N, D), (B, H, N, N, D), (B, H, N, N, D)]
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype).requires_grad_(True) for s in shapes]


def _attention_inputs(dtype: torch.dtype, shape: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_(True) for _ in range(3)]


_CAUSAL_TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)  # the device's mask template


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: object) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)


def _band(S: int, W: int) -> torch.Tensor:
    i, j = torch.arange(S).view(-1, 1), torch.arange(S).view(1, -1)
    return (j <= i) & (j > i - W)


CASES = [
    DemoCase("block_attention_residuals", "block_attention_residuals_grad", "T=2048 N=8 H=1024",
             _bar_inputs, op_plugin.block_attention_residuals,
             lambda *x: reference.block_attention_residuals(*x)[0]),
    DemoCase("fused_floyd_attention", "fused_floyd_attention_grad", "B=1 H=2 N=M=K=64 D=32",
             _floyd_inputs, lambda *x: op_plugin.fused_floyd_attention(*x, scale_value=32 ** -0.5)[2],
             lambda *x: reference.fused_floyd_attention(*x, scale_value=32 ** -0.5)),
    DemoCase("flash_attn", "flash_attn_grad", "BSND B=1 S=1024 N=8 D=64 causal",
             lambda dtype: _attention_inputs(dtype, (1, 1024, 8, 64)),
             lambda q, k, v: op_plugin.flash_attn(q, k, v, softmax_scale=0.125, mask_mode=3,
                                                  attn_mask=_CAUSAL_TEMPLATE)[0],
             lambda q, k, v: _sdpa(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True,
                                   scale=0.125).transpose(1, 2)),
    DemoCase("swa_forward", "swa_backward", "BNSD S=2048 N=8 D=64 band 256",
             lambda dtype: _attention_inputs(dtype, (1, 8, 2048, 64)),
             lambda q, k, v: op_plugin.swa_forward(q, k, v, 8, "BNSD", atten_mask=_CAUSAL_TEMPLATE, scale=0.125,
                                                   pre_tockens=255, next_tockens=0, sparse_mode=4)[0],
             lambda q, k, v: _sdpa(q, k, v, attn_mask=_band(2048, 256), scale=0.125)),
]


def _forward_backward(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor], grad: torch.Tensor) -> list[torch.Tensor]:
    for x in inputs:
        x.grad = None
    out = fn(*inputs)
    out.backward(grad)
    return [out.detach()] + [x.grad for x in inputs]


def run() -> int:
    print(f"op_plugin {op_plugin.__version__} | torch {torch.__version__} | ISA {op_plugin.isa_level()} | "
          f"{torch.get_num_threads()} threads")
    print(f"{'op (forward + backward)':44} {'dtype':9} {'max rel err vs fp64':>20} {'PyTorch err':>12} {'speed-up':>9}")
    registered = {name for name in op_plugin._op_names}
    covered = {c.forward for c in CASES} | {c.backward for c in CASES}
    failures = 0
    for case in CASES:
        for dtype in (torch.float32, torch.bfloat16):
            inputs = case.make_inputs(dtype)
            out_shape = case.composite(*[x.detach() for x in inputs]).shape
            grad = torch.randn(out_shape, generator=torch.Generator().manual_seed(1)).to(dtype)
            ours = _forward_backward(case.ours, inputs, grad)
            same = _forward_backward(case.composite, inputs, grad)
            ref = _forward_backward(case.composite, [x.detach().double().requires_grad_(True) for x in inputs], grad.double())
            ours_err = max(((o.double() - r).abs().max() / r.abs().max().clamp_min(1e-30)).item() for o, r in zip(ours, ref))
            same_err = max(((s.double() - r).abs().max() / r.abs().max().clamp_min(1e-30)).item() for s, r in zip(same, ref))
            # The calls above were the warm-up; three runs each keep the demo short (benchmarks/ has
            # the careful figures): PyTorch's window step alone takes seconds.
            t_ours = median_seconds(lambda: _forward_backward(case.ours, inputs, grad), repeat=3, warmup=0)
            t_torch = median_seconds(lambda: _forward_backward(case.composite, inputs, grad), repeat=3, warmup=0)
            ok = ours_err <= 2 * same_err + 4 * torch.finfo(dtype).eps
            failures += not ok
            label = f"{case.forward} {case.description}"
            print(f"{label:44} {str(dtype).replace('torch.', ''):9} {ours_err:20.2e} {same_err:12.2e} "
                  f"{t_torch / t_ours:8.1f}x{'' if ok else '  OUT OF BUDGET'}")
    missing = sorted(registered - covered)
    if missing:
        print(f"ops without a demo case: {', '.join(missing)}")
    print("demo: all ops agree with PyTorch within budget" if not failures else f"demo: {failures} case(s) out of budget")
    return 1 if failures else 0
