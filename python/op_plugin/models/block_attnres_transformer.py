"""A small decoder-only transformer with Block Attention Residuals, on op_plugin's ops.

Attention runs through ``op_plugin.flash_attn`` in BSND layout (the projections' natural
[B, S, N, D] view, so nothing is transposed), with GQA (fewer key/value heads than query
heads): causal layers use mask_mode 3, sliding-window layers mask_mode 4 with
win_left = window - 1, win_right = 0 (each query sees itself and the window - 1 keys before it).
``swa_forward`` computes the same band at the same speed (docs/benchmarks.md); flash_attn is
used for both kinds so one call covers every layer.

The residual path is Block AttnRes (Kimi, "Attention Residuals"; SPEC §4), as the paper's
pseudocode writes it: the stream is cut into blocks of ``layers_per_block`` transformer
layers; inside a block the sublayer outputs are summed into a partial block; before every
sublayer (and before the output head) ``block_attention_residuals`` attends over the completed
blocks and the partial block, with a learned pseudo-query (proj_weight, zero at start, so the
weights start uniform) and an RMS-norm weight. The token embedding is the first block.

ReferenceBlockAttnResTransformer (op_plugin.models.reference) is the same network in plain
PyTorch; it subclasses this one and overrides only ``attend`` and ``block_residual``, so the
two share every parameter name and one state_dict loads into both.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import op_plugin

KINDS = ("causal", "window")
_TEMPLATE: Tensor | None = None


def mask_template() -> Tensor:
    """The device's 2048x2048 causal mask template that mask_mode 3/4 require (contents unread on CPU)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        _TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.int8), 1)
    return _TEMPLATE


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 256  # bytes
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 32
    mlp_hidden: int = 384  # SwiGLU hidden width
    layers: tuple[str, ...] = ("window", "window", "window", "causal")  # one attention kind per layer
    window: int = 64  # keys a window layer sees, itself included
    layers_per_block: int = 2  # transformer layers per AttnRes block (2 sublayers each)
    norm_eps: float = 1e-6
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        if not self.layers or any(kind not in KINDS for kind in self.layers):
            raise ValueError(f"layers must be a non-empty sequence of {KINDS}, but got {self.layers}")
        if self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"head_dim must be even (rotary embedding), but got {self.head_dim}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1, but got {self.window}")
        if self.layers_per_block < 1:
            raise ValueError(f"layers_per_block must be >= 1, but got {self.layers_per_block}")
        for name in ("vocab_size", "d_model", "mlp_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, but got {getattr(self, name)}")


def rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary position embedding of x [B, S, N, D] (rotate-half form); cos/sin are [S, 1, D/2]."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class BlockResidual(nn.Module):
    """The pseudo-query and RMS-norm weight of one Block AttnRes call (SPEC §4)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj_weight = nn.Parameter(torch.zeros(d_model))  # zero: uniform weights at start
        self.norm_weight = nn.Parameter(torch.ones(d_model))


class Layer(nn.Module):
    def __init__(self, cfg: ModelConfig, kind: str, first: bool) -> None:
        super().__init__()
        self.kind = kind
        d, hd = cfg.d_model, cfg.head_dim
        # The first layer's attention reads the embedding alone: nothing to attend over.
        self.attn_res = None if first else BlockResidual(d)
        self.attn_norm = nn.RMSNorm(d, eps=cfg.norm_eps)
        self.q_proj = nn.Linear(d, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, d, bias=False)
        self.mlp_res = BlockResidual(d)
        self.mlp_norm = nn.RMSNorm(d, eps=cfg.norm_eps)
        self.gate_proj = nn.Linear(d, cfg.mlp_hidden, bias=False)
        self.up_proj = nn.Linear(d, cfg.mlp_hidden, bias=False)
        self.down_proj = nn.Linear(cfg.mlp_hidden, d, bias=False)


class BlockAttnResTransformer(nn.Module):
    """Byte-level decoder-only transformer; forward(tokens [B, S]) -> logits [B, S, vocab]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Layer(cfg, kind, i == 0) for i, kind in enumerate(cfg.layers))
        self.final_res = BlockResidual(cfg.d_model)
        self.final_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        depth_scale = (2 * len(cfg.layers)) ** -0.5  # GPT-2 style: sublayer outputs summed 2L times
        for layer in self.layers:
            layer.o_proj.weight.data.mul_(depth_scale)
            layer.down_proj.weight.data.mul_(depth_scale)

    # The two functions the reference model overrides.
    def attend(self, q: Tensor, k: Tensor, v: Tensor, kind: str) -> Tensor:
        """Attention of q [B, S, N, D] over k, v [B, S, Nkv, D] (BSND); returns [B, S, N, D]."""
        kw: dict[str, object] = dict(mask_mode=3, attn_mask=mask_template())
        if kind == "window":
            kw.update(mask_mode=4, win_left=self.cfg.window - 1, win_right=0)
        return op_plugin.flash_attn(q, k, v, softmax_scale=q.shape[-1] ** -0.5, **kw)[0]

    def block_residual(self, blocks: Tensor, partial: Tensor, res: BlockResidual) -> Tensor:
        """Softmax attention over the completed blocks [B, S, N, H] and the partial block [B, S, H]."""
        B, S, N, H = blocks.shape
        hidden = op_plugin.block_attention_residuals(partial.reshape(B * S, H), blocks.view(B * S, N, H),
                                                     res.proj_weight, res.norm_weight, norm_eps=self.cfg.norm_eps)
        return hidden.view(B, S, H)

    def _rope(self, S: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        half = self.cfg.head_dim // 2
        freq = self.cfg.rope_base ** (-torch.arange(half, dtype=torch.float64) / half)
        angle = torch.arange(S, dtype=torch.float64).view(S, 1, 1) * freq
        return angle.cos().to(dtype), angle.sin().to(dtype)

    def forward(self, tokens: Tensor) -> Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be 2D [B, S], but got {tokens.dim()}D")
        cfg = self.cfg
        B, S = tokens.shape
        x = self.embed(tokens)
        cos, sin = self._rope(S, x.dtype)
        completed: list[Tensor] = []
        blocks: Tensor | None = None  # completed blocks stacked [B, S, N, H] (set at layer 0's boundary)
        partial: Tensor | None = x  # the embedding becomes the first completed block at layer 0
        for i, layer in enumerate(self.layers):
            h = partial if layer.attn_res is None else self.block_residual(blocks, partial, layer.attn_res)
            if i % cfg.layers_per_block == 0:  # block boundary: the partial block is complete
                completed.append(partial)
                # one stacked copy serves (and is saved once for) every call until the next boundary
                blocks = torch.stack(completed, dim=2)
                partial = None
            a = layer.attn_norm(h)
            q = rotary(layer.q_proj(a).view(B, S, cfg.n_heads, cfg.head_dim), cos, sin)
            k = rotary(layer.k_proj(a).view(B, S, cfg.n_kv_heads, cfg.head_dim), cos, sin)
            v = layer.v_proj(a).view(B, S, cfg.n_kv_heads, cfg.head_dim)
            out = layer.o_proj(self.attend(q, k, v, layer.kind).reshape(B, S, -1))
            partial = out if partial is None else partial + out
            m = layer.mlp_norm(self.block_residual(blocks, partial, layer.mlp_res))
            partial = partial + layer.down_proj(F.silu(layer.gate_proj(m)) * layer.up_proj(m))
        h = self.block_residual(blocks, partial, self.final_res)
        return self.lm_head(self.final_norm(h))


def lm_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean next-byte cross entropy (in float32 for 16-bit logits)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
