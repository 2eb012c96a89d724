"""The training text and its byte tokenizer (no downloads).

The default corpus is made here: short stories generated from a small grammar with a fixed
seed (about 300 KB of English-like text: names, places, objects, counting and weather, with
long-range structure, e.g. a story's hero is named again at its end). It is learnable enough
that a few hundred steps of a tiny model show a clear loss curve. Any UTF-8 text file can be
used instead (``op-plugin demo train --corpus FILE``).
"""
from __future__ import annotations

import random
from pathlib import Path

import torch
from torch import Tensor

_NAMES = ["Ada", "Bram", "Cleo", "Dara", "Emil", "Fern", "Gus", "Hana", "Ivo", "Juno", "Kai", "Lena", "Milo",
          "Nora", "Otto", "Pia", "Quin", "Rosa", "Sami", "Tova"]
_PLACES = ["the old mill", "the harbour", "the forest", "the market", "the library", "the hill", "the river",
           "the garden", "the station", "the bakery", "the lighthouse", "the meadow"]
_OBJECTS = ["a red kite", "a lantern", "a brass key", "a map", "a loaf of bread", "a small boat", "a letter",
            "a blue jar", "a compass", "a wooden box", "a violin", "a basket of apples"]
_FEELINGS = ["happy", "tired", "curious", "brave", "worried", "calm", "surprised", "proud"]
_WEATHER = ["It was raining", "The sun was warm", "A cold wind blew", "Snow fell softly", "Fog covered the town",
            "The sky was clear"]
_NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def _story(rng: random.Random) -> str:
    hero, friend = rng.sample(_NAMES, 2)
    place, other = rng.sample(_PLACES, 2)
    thing = rng.choice(_OBJECTS)
    n = rng.randrange(2, 10)
    lines = [
        f"{rng.choice(_WEATHER)} when {hero} walked to {place}.",
        f"At {place}, {hero} met {friend}, who was {rng.choice(_FEELINGS)}.",
        f"\"Have you seen {thing}?\" asked {friend}.",
        f"\"Yes,\" said {hero}, \"I saw it near {other}.\"",
        f"They counted {_NUMBERS[n - 1]} steps: " + ", ".join(_NUMBERS[:n]) + ".",
        f"At {other} they found {thing}, and {friend} felt {rng.choice(_FEELINGS)}.",
        f"That evening {hero} went home and wrote about {thing}.",
    ]
    if rng.random() < 0.5:
        lines.insert(3, f"{hero} thought for a moment and looked at the sky.")
    return " ".join(lines) + "\n"


def make_corpus(n_bytes: int = 300_000, seed: int = 0) -> str:
    """Generated stories, at least n_bytes long (deterministic for a seed)."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_bytes:
        parts.append(_story(rng))
        size += len(parts[-1])
    return "".join(parts)


def encode(text: str) -> Tensor:
    """Byte-level tokens (vocabulary 256) of UTF-8 text, int64 [len]."""
    return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()


def decode(tokens: Tensor) -> str:
    return bytes(tokens.to(torch.uint8).tolist()).decode("utf-8", errors="replace")


def load_tokens(corpus: str | None = None) -> Tensor:
    """Tokens of the generated corpus, or of the text file ``corpus``."""
    if corpus is None:
        return encode(make_corpus())
    path = Path(corpus)
    if not path.is_file():
        raise FileNotFoundError(f"corpus must be a text file, but {corpus!r} is not a file")
    return encode(path.read_text(encoding="utf-8", errors="replace"))


def split(tokens: Tensor, val_fraction: float = 0.1) -> tuple[Tensor, Tensor]:
    """(train, validation): the last val_fraction of the text is held out."""
    cut = int(len(tokens) * (1 - val_fraction))
    return tokens[:cut], tokens[cut:]


def batches(tokens: Tensor, steps: int, batch: int, seq_len: int, seed: int) -> list[tuple[Tensor, Tensor]]:
    """``steps`` batches of random windows: (inputs [batch, seq_len], targets shifted by one byte)."""
    if len(tokens) < seq_len + 2:
        raise ValueError(f"the corpus ({len(tokens)} bytes) must be longer than seq_len + 1 ({seq_len + 1})")
    g = torch.Generator().manual_seed(seed)
    out = []
    offsets = torch.arange(seq_len + 1)
    for _ in range(steps):
        starts = torch.randint(0, len(tokens) - seq_len - 1, (batch, 1), generator=g)
        window = tokens[starts + offsets]
        out.append((window[:, :-1], window[:, 1:]))
    return out
