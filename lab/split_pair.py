"""A tiny target/draft pair whose acceptance depends on the request (issue 16's test pair).

The vocabulary's non-special tokens are split in two halves, and the cyclic target
(:mod:`tiny_models`) cycles within each half: a generation that starts in a half stays in it.
The draft agrees with the target on a fraction ``high`` of one half's tokens and ``low`` of the
other's, so a prompt ending in the high half gets per-position acceptance near ``high`` for
its whole life, and one ending in the low half near ``low``. Real vLLM then sees requests that
truly differ, with outputs still exact under greedy verification.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from banditk.testing.tiny_models import SPECIAL_TOKENS, TinyModelSpec, build_cyclic_model, build_tokenizer


def split_cycle_map(vocab_size: int, num_special: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(f, high, low)``: a next-token map with one cycle through each half of the tokens.

    Special tokens map into the high half's cycle, so they are never produced.
    """
    if vocab_size - num_special < 4:
        raise ValueError(f"`vocab_size` must leave at least 4 non-special tokens, got {vocab_size}.")
    rng = np.random.default_rng(seed)
    order = rng.permutation(np.arange(num_special, vocab_size))
    high, low = np.sort(order[: order.size // 2]), np.sort(order[order.size // 2 :])
    f = np.empty(vocab_size, dtype=np.int64)
    for half in (order[: order.size // 2], order[order.size // 2 :]):
        f[half] = np.roll(half, -1)
    f[:num_special] = order[0]
    return f, high, low


def split_partial_map(
    f: np.ndarray, high: np.ndarray, low: np.ndarray, agreement: tuple[float, float], seed: int
) -> np.ndarray:
    """A draft map equal to ``f`` on a fraction ``agreement[0]`` of ``high`` and ``agreement[1]`` of ``low``.

    Where it disagrees it names another token of the same half, so a draft never leaves its
    request's half either.
    """
    for name, p in zip(("high", "low"), agreement, strict=True):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"`agreement` ({name} half) must be in [0, 1], got {p!r}.")
    rng = np.random.default_rng(seed + 1)
    g = f.copy()
    for half, p in zip((high, low), agreement, strict=True):
        # An exact share, not a Bernoulli count: the halves' acceptance is then what was asked.
        wrong = rng.permutation(half)[: round((1 - p) * half.size)]
        for t in wrong:
            choices = half[half != f[t]]
            g[t] = choices[rng.integers(choices.size)]
    return g


@dataclass(frozen=True)
class SplitPair:
    """Paths of a built split pair, its maps, and the token halves a prompt may end in."""

    target: str
    draft: str
    next_token: np.ndarray = field(repr=False)
    draft_next_token: np.ndarray = field(repr=False)
    high: np.ndarray = field(repr=False)
    low: np.ndarray = field(repr=False)
    agreement: tuple[float, float]

    def prompt(self, half: str, length: int, seed: int) -> list[int]:
        """Token ids of a prompt whose every token lies in ``half`` ('high' or 'low')."""
        if half not in ("high", "low"):
            raise ValueError(f"`half` must be 'high' or 'low', got {half!r}.")
        if length < 1:
            raise ValueError(f"`length` must be >= 1, got {length}.")
        tokens = self.high if half == "high" else self.low
        return np.random.default_rng(seed).choice(tokens, size=length).tolist()


def build_split_pair(
    root: str | os.PathLike,
    *,
    agreement: tuple[float, float] = (0.9, 0.3),
    target: TinyModelSpec = TinyModelSpec(),
    draft: TinyModelSpec = TinyModelSpec(num_layers=1),
    vocab_size: int = 512,
    seed: int = 0,
) -> SplitPair:
    """Build (cached by content) the tokenizer, split target and split draft under ``root``."""
    root = Path(root)
    high_p, low_p = agreement
    tag = f"v{vocab_size}-s{seed}-p{high_p}x{low_p}-t{target.num_layers}x{target.hidden_size}-d{draft.num_layers}x{draft.hidden_size}"
    tdir, ddir, kdir = root / f"split-target-{tag}", root / f"split-draft-{tag}", root / f"tokenizer-v{vocab_size}"
    if not (kdir / "tokenizer.json").exists():
        build_tokenizer(kdir, vocab_size)
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(str(kdir)))
    f, high, low = split_cycle_map(vocab, len(SPECIAL_TOKENS), seed)
    g = split_partial_map(f, high, low, agreement, seed)
    if not (tdir / "config.json").exists():
        build_cyclic_model(tdir, f, target, kdir, seed)
    if not (ddir / "config.json").exists():
        build_cyclic_model(ddir, g, draft, kdir, seed + 100)
    return SplitPair(str(tdir), str(ddir), f, g, high, low, (high_p, low_p))
