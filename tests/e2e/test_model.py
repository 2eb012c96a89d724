"""op_plugin.models: the op_plugin transformer against its plain PyTorch twin, training, compile, CLI."""
from __future__ import annotations

import pytest
import torch

from op_plugin.models import BlockAttnResTransformer, ModelConfig, ReferenceBlockAttnResTransformer, lm_loss
from op_plugin.models import data, train

# Two blocks of one layer each, both attention kinds, GQA 4:2, a window shorter than the sequence.
TINY = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, mlp_hidden=48,
                   layers=("window", "causal", "window"), window=5, layers_per_block=1)


def _pair(dtype: torch.dtype, cfg: ModelConfig = TINY) -> tuple[torch.nn.Module, torch.nn.Module]:
    ours = train.make_model("op_plugin", cfg, 0, dtype)
    with torch.no_grad():  # move every weight off its init (proj_weight starts at 0: uniform block weights)
        g = torch.Generator().manual_seed(1)
        for p in ours.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
    ref = ReferenceBlockAttnResTransformer(cfg).to(dtype)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def _loss_and_grads(model: torch.nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
    logits = model(tokens[:, :-1])
    loss = lm_loss(logits, tokens[:, 1:])
    loss.backward()
    # a compiled module names its parameters _orig_mod.NAME
    return logits.detach(), loss.detach(), {n.removeprefix("_orig_mod."): p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
def test_op_plugin_model_matches_reference(dtype: torch.dtype, rtol: float) -> None:
    ours, ref = _pair(dtype)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    tokens = torch.randint(0, 256, (2, 19), generator=torch.Generator().manual_seed(2))
    logits_o, loss_o, grads_o = _loss_and_grads(ours, tokens)
    logits_r, loss_r, grads_r = _loss_and_grads(ref, tokens)
    torch.testing.assert_close(logits_o, logits_r, rtol=rtol, atol=rtol)
    torch.testing.assert_close(loss_o, loss_r, rtol=rtol, atol=rtol)
    assert grads_o.keys() == grads_r.keys() and all(g is not None for g in grads_o.values())
    for name, g in grads_o.items():
        scale = grads_r[name].abs().max().item()
        assert scale > 0, f"{name}: zero gradient, the test would not see a mismatch"
        torch.testing.assert_close(g / scale, grads_r[name] / scale, rtol=rtol, atol=rtol, msg=name)


def test_bfloat16_model_close_to_float32() -> None:
    ours32, _ = _pair(torch.float32)
    ours16 = BlockAttnResTransformer(TINY).to(torch.bfloat16)
    ours16.load_state_dict({k: v.to(torch.bfloat16) for k, v in ours32.state_dict().items()})
    tokens = torch.randint(0, 256, (2, 19), generator=torch.Generator().manual_seed(3))
    _, loss32, _ = _loss_and_grads(ours32, tokens)
    _, loss16, grads16 = _loss_and_grads(ours16, tokens)
    assert all(g.dtype == torch.bfloat16 and torch.isfinite(g).all() for g in grads16.values())
    assert abs(loss16.item() - loss32.item()) < 0.05 * loss32.item()  # bfloat16 keeps ~3 significant digits


def test_causal_and_window_masks() -> None:
    """Changing byte t changes no logit before t, and a window layer alone sees window - 1 bytes back."""
    model, _ = _pair(torch.float64)
    tokens = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(4))
    changed = tokens.clone()
    changed[0, 9] = (changed[0, 9] + 1) % 256
    with torch.no_grad():
        diff = (model(tokens) - model(changed)).abs().amax(-1)[0]
    assert diff[:9].max() == 0 and diff[9:].min() > 0

    window_only = ModelConfig(**{**TINY.__dict__, "layers": ("window",)})
    model, _ = _pair(torch.float64, window_only)
    with torch.no_grad():
        diff = (model(tokens) - model(changed)).abs().amax(-1)[0]
    # one window layer of 5: position 9 reaches 9..13 only
    assert diff[9:14].min() > 0 and diff[:9].max() == 0 and diff[14:].max() == 0


def test_autocast_model_close_to_reference() -> None:
    """Mixed precision: float32 weights, the forward under torch.autocast(bfloat16). The ops take the
    mixed dtypes a model hands them (a float32 rotary query with bf16 values, bf16 block outputs
    joining float32 blocks) as SDPA and torch.cat do, and the loss stays within bf16's reach of the
    plain PyTorch model's under the same autocast."""
    ours, ref = _pair(torch.float32)
    tokens = torch.randint(0, 256, (2, 19), generator=torch.Generator().manual_seed(4))
    losses = []
    for model in (ours, ref):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = lm_loss(logits, tokens[:, 1:])
        loss.backward()
        assert all(p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all() for p in model.parameters())
        losses.append(loss.item())
    _, loss32, _ = _loss_and_grads(_pair(torch.float32)[0], tokens)
    assert abs(losses[0] - losses[1]) < 0.01 * losses[1], losses
    assert abs(losses[0] - loss32.item()) < 0.01 * loss32.item(), (losses, loss32)


def test_training_decreases_loss() -> None:
    cfg = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, mlp_hidden=64, window=16)
    tc = train.TrainConfig(steps=20, batch=4, seq_len=48, lr=2e-2, warmup=3)
    results = train.train_both(cfg, tc, data.encode(data.make_corpus(30_000)), progress=False)
    for impl, r in results.items():
        first, last = r["losses"][0], sum(r["losses"][-5:]) / 5
        assert first > 5.0, (impl, first)  # ln(256) = 5.55 at a near-uniform start
        assert last < 3.5, (impl, r["losses"])  # bytes of English-like text: the letter statistics are learnt
    diff = max(abs(a - b) for a, b in zip(results["op_plugin"]["losses"], results["reference"]["losses"]))
    assert diff < train.TOLERANCE["float32"], diff


def test_training_under_autocast() -> None:
    """Mixed-precision training (--dtype autocast_bfloat16): both models learn, and their losses agree
    step by step until low-precision training's loss spikes set in. At this learning rate (2e-2)
    they do from about step 11 on, where plain bfloat16 models of both kinds part by 0.27 too."""
    cfg = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, mlp_hidden=64, window=16)
    tc = train.TrainConfig(steps=20, batch=4, seq_len=48, lr=2e-2, warmup=3, dtype="autocast_bfloat16")
    results = train.train_both(cfg, tc, data.encode(data.make_corpus(30_000)), progress=False)
    for impl, r in results.items():
        assert r["losses"][0] > 5.0 and sum(r["losses"][-5:]) / 5 < 3.5, (impl, r["losses"])
    ours, ref = results["op_plugin"]["losses"], results["reference"]["losses"]
    assert max(abs(a - b) for a, b in zip(ours[:10], ref[:10])) < 0.01, (ours, ref)


def test_compile_forward_and_backward() -> None:
    """torch.compile traces the ops (fake kernels, autograd) in one graph; aot_eager keeps it quick."""
    torch._dynamo.reset()
    model, _ = _pair(torch.float32)
    tokens = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(5))
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    logits_c, loss_c, grads_c = _loss_and_grads(compiled, tokens)
    model.zero_grad(set_to_none=True)
    logits_e, loss_e, grads_e = _loss_and_grads(model, tokens)
    torch.testing.assert_close(logits_c, logits_e)
    for name in grads_e:
        torch.testing.assert_close(grads_c[name], grads_e[name], msg=name)


@pytest.mark.slow
def test_compile_inductor() -> None:
    """The inductor backend (C++ codegen; over a minute to compile on 2 cores)."""
    torch._dynamo.reset()
    model, _ = _pair(torch.float32)
    tokens = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(5))
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(tokens), model(tokens), rtol=1e-5, atol=1e-5)


def test_demo_train_cli(tmp_path) -> None:
    from op_plugin.__main__ import main

    png = tmp_path / "loss.png"
    assert main(["demo", "train", "--steps", "4", "--batch", "2", "--seq-len", "32", "--no-memory",
                 "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match="n_heads"):
        ModelConfig(n_heads=6, n_kv_heads=4)
    with pytest.raises(ValueError, match="layers"):
        ModelConfig(layers=("dense",))
    with pytest.raises(ValueError, match="tokens must be 2D"):
        BlockAttnResTransformer(TINY)(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="dtype"):
        train.TrainConfig(dtype="float16x")
    with pytest.raises(ValueError, match="seq_len"):
        data.batches(data.encode("short"), 1, 1, 16, seed=0)
