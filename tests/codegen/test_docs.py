"""docs/ops/ (one page per op, index, limits) is generated from the registry and never stale."""
from __future__ import annotations

from pathlib import Path

from codegen.generate import generate_docs

ROOT = Path(__file__).resolve().parents[2]


def test_docs_are_up_to_date() -> None:
    fm = generate_docs(str(ROOT / "op_plugin_functions.yaml"), str(ROOT / "docs" / "ops"), check_only=True)
    assert not fm.stale, ("stale docs (run python -m codegen --docs docs/ops):\n  " + "\n  ".join(fm.stale))


def test_a_page_says_what_the_registry_says(tmp_path: Path) -> None:
    fm = generate_docs(str(ROOT / "op_plugin_functions.yaml"), str(tmp_path))
    assert {"index.md", "limits.md", "swa_forward.md", "flash_attn.md"} <= set(fm.written)
    page = (tmp_path / "swa_forward.md").read_text()
    for piece in ("swa_forward(Tensor query, Tensor key, Tensor value, int head_num, str input_layout",
                  "| `keep_prob` | `float` | `1.` |",
                  "The sparse_mode value should be 0 or 4, but got {sparse_mode}",  # the first error
                  "D must be in [1, 768] on the device",                          # a strict limit
                  "The backward is [`swa_backward`](swa_backward.md)",
                  "| `seed` | `int` | fake value `0 if keep_prob == 1.0 else data_dependent()` |",
                  "Random numbers: when `keep_prob < 1.0`"):
        assert piece in page, piece
    errors = page[page.index("## Errors"):]
    assert errors.index("sparse_mode value should be 0 or 4") < errors.index("head_num must > 0")
    assert "The backward of [`flash_attn`](flash_attn.md)" in (tmp_path / "flash_attn_grad.md").read_text()
    limits = (tmp_path / "limits.md").read_text()
    assert "[`fused_floyd_attention`](fused_floyd_attention.md)" in limits and "on the device" in limits
