"""Tiny local models with controllable speculative acceptance (no model hub).

A "cyclic" Llama model makes its greedy next token a fixed function ``f`` of the
current token: attention and MLP output projections are zero, so the residual
stream stays the token's embedding, and the LM head is built from the
embeddings so that its argmax is ``f(token)``. ``f`` is one long cycle over all
non-special tokens, so a generation keeps visiting new tokens. A draft model
built the same way from a map that agrees with ``f`` on a fraction ``p`` of
tokens gives acceptance close to ``p`` per position under exact greedy
verification. More layers or a wider hidden size make the compute real while
outputs stay deterministic (see ../shared/VLLM_ON_CPU.md).

The tokenizer is a byte-level BPE trained locally with ``tokenizers`` on Python
source files of the standard library, saved as a fast tokenizer.

Needs torch, transformers and tokenizers (the ``cpu`` extra installs them).
"""

from __future__ import annotations

import glob
import json
import os
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of a cyclic model.

    Attributes:
        num_layers: decoder layers (compute cost; outputs do not depend on it).
        hidden_size: residual width; larger separates logits better.
        num_heads: attention heads (head_dim = hidden_size / num_heads).
        intermediate_size: MLP width (0: 2 x hidden_size).
    """

    num_layers: int = 2
    hidden_size: int = 128
    num_heads: int = 4
    intermediate_size: int = 0


def build_tokenizer(out_dir: str | os.PathLike, vocab_size: int = 512) -> int:
    """Train a byte-level BPE tokenizer on local text and save it to ``out_dir``; return its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "[a-m]*.py")))[:40]
    if not files:
        raise FileNotFoundError("no local text found to train the tokenizer on (the stdlib's .py files).")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(str(out))
    return len(fast)


def cycle_map(vocab_size: int, num_special: int, seed: int) -> np.ndarray:
    """``f``: one cycle through all non-special tokens (in a seeded random order).

    Special tokens map into the cycle, so they are never produced.
    """
    rng = np.random.default_rng(seed)
    order = rng.permutation(np.arange(num_special, vocab_size))
    f = np.empty(vocab_size, dtype=np.int64)
    f[order] = np.roll(order, -1)
    f[:num_special] = order[0]
    return f


def partial_map(f: np.ndarray, agreement: float, num_special: int, seed: int) -> np.ndarray:
    """A map equal to ``f`` on a fraction ``agreement`` of tokens and different elsewhere."""
    if not 0.0 <= agreement <= 1.0:
        raise ValueError(f"`agreement` must be in [0, 1], got {agreement!r}.")
    rng = np.random.default_rng(seed + 1)
    g = f.copy()
    n = f.size
    disagree = rng.random(n) >= agreement
    for t in np.flatnonzero(disagree):
        other = int(rng.integers(num_special, n))
        while other == f[t]:
            other = int(rng.integers(num_special, n))
        g[t] = other
    return g


def build_cyclic_model(
    out_dir: str | os.PathLike,
    next_token: np.ndarray,
    spec: TinyModelSpec,
    tokenizer_dir: str | os.PathLike | None = None,
    seed: int = 0,
    max_position_embeddings: int = 1024,
) -> None:
    """Save a Llama model (fp32 safetensors) whose greedy next token is ``next_token[token]``.

    Raises:
        RuntimeError: the built LM head does not reproduce ``next_token`` exactly
            (hidden size too small for the vocabulary).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = int(next_token.size)
    h = spec.hidden_size
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=h,
        intermediate_size=spec.intermediate_size or 2 * h,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    gen = np.random.default_rng(seed + 7)
    emb = gen.standard_normal((vocab, h))
    if vocab <= h:  # exactly orthogonal embeddings when possible
        q, _ = np.linalg.qr(gen.standard_normal((h, vocab)))
        emb = q.T * np.sqrt(h)
    normed = emb / np.sqrt((emb**2).mean(axis=1, keepdims=True) + cfg.rms_norm_eps)
    head = np.zeros((vocab, h))
    for t in range(vocab):
        head[next_token[t]] += normed[t]
    logits = normed @ head.T
    if not np.array_equal(logits.argmax(axis=1), next_token):
        raise RuntimeError(f"hidden_size={h} is too small to separate {vocab} tokens; use a wider model.")
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.from_numpy(emb).float())
        model.lm_head.weight.copy_(torch.from_numpy(head / np.sqrt(h)).float())
        model.model.norm.weight.fill_(1.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    out = Path(out_dir)
    model.save_pretrained(str(out), safe_serialization=True)
    gen_cfg = out / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()  # no sampling defaults: tests choose their own
    if tokenizer_dir is not None:
        for name in os.listdir(tokenizer_dir):
            (out / name).write_bytes((Path(tokenizer_dir) / name).read_bytes())
    (out / "banditk_cyclic.json").write_text(json.dumps({"next_token": next_token.tolist()}))


def build_mimo_mtp_model(
    out_dir: str | os.PathLike,
    next_token: np.ndarray,
    spec: TinyModelSpec,
    tokenizer_dir: str | os.PathLike | None = None,
    seed: int = 0,
) -> None:
    """Save a MiMo-architecture cyclic target with one MTP layer (``num_nextn_predict_layers=1``).

    The target is a Qwen2 cyclic model (as :func:`build_cyclic_model`); the MTP layer
    passes the new token's normalised embedding through (``input_proj = [0 | I]``, zero
    output projections), so with the shared LM head it predicts ``next_token`` exactly:
    acceptance 1 at every position. Use with ``{"method": "mtp"}``.
    """
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab, h = int(next_token.size), spec.hidden_size
    inter = spec.intermediate_size or 2 * h
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=h,
        intermediate_size=inter,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).to(torch.float32)
    emb, head = _cyclic_weights(next_token, h, seed, cfg.rms_norm_eps)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.from_numpy(emb).float())
        model.lm_head.weight.copy_(torch.from_numpy(head).float())
        model.model.norm.weight.fill_(1.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    out = Path(out_dir)
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    weights = load_file(str(out / "model.safetensors"))
    pre = "model.mtp_layers.0."
    src = model.model.layers[0]
    for name, t in src.state_dict().items():
        weights[pre + name] = t.detach().clone().contiguous()
    weights[pre + "self_attn.o_proj.weight"] = torch.zeros(h, h)
    weights[pre + "mlp.down_proj.weight"] = torch.zeros(h, inter)
    for norm in ("token_layernorm", "hidden_layernorm", "final_layernorm"):
        weights[pre + norm + ".weight"] = torch.ones(h)
    weights[pre + "input_proj.weight"] = torch.cat([torch.zeros(h, h), torch.eye(h)], dim=1).contiguous()
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    conf = json.loads((out / "config.json").read_text())
    conf.update({"architectures": ["MiMoForCausalLM"], "num_nextn_predict_layers": 1})
    (out / "config.json").write_text(json.dumps(conf, indent=2))
    index = out / "model.safetensors.index.json"
    index.unlink(missing_ok=True)
    if tokenizer_dir is not None:
        for name in os.listdir(tokenizer_dir):
            (out / name).write_bytes((Path(tokenizer_dir) / name).read_bytes())


def _cyclic_weights(next_token: np.ndarray, h: int, seed: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Embedding and LM-head matrices whose greedy map is ``next_token`` (see the module docstring)."""
    vocab = int(next_token.size)
    gen = np.random.default_rng(seed + 7)
    emb = gen.standard_normal((vocab, h))
    if vocab <= h:
        q, _ = np.linalg.qr(gen.standard_normal((h, vocab)))
        emb = q.T * np.sqrt(h)
    normed = emb / np.sqrt((emb**2).mean(axis=1, keepdims=True) + eps)
    head = np.zeros((vocab, h))
    for t in range(vocab):
        head[next_token[t]] += normed[t]
    if not np.array_equal((normed @ head.T).argmax(axis=1), next_token):
        raise RuntimeError(f"hidden_size={h} is too small to separate {vocab} tokens; use a wider model.")
    return emb, head / np.sqrt(h)


def build_mtp_target(
    root: str | os.PathLike, *, target: TinyModelSpec = TinyModelSpec(), vocab_size: int = 512, seed: int = 0
) -> tuple[str, np.ndarray]:
    """Build (cached) tokenizer and MiMo MTP cyclic target under ``root``; return (path, next-token map)."""
    root = Path(root)
    kdir = root / f"tokenizer-v{vocab_size}"
    if not (kdir / "tokenizer.json").exists():
        build_tokenizer(kdir, vocab_size)
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(str(kdir)))
    f = cycle_map(vocab, len(SPECIAL_TOKENS), seed)
    tdir = root / f"mimo-mtp-v{vocab_size}-s{seed}-t{target.num_layers}x{target.hidden_size}"
    if not (tdir / "config.json").exists():
        build_mimo_mtp_model(tdir, f, target, kdir, seed)
    return str(tdir), f


@dataclass(frozen=True)
class TinyPair:
    """Paths of a built target/draft pair and the maps that drive them."""

    target: str
    draft: str
    next_token: np.ndarray = field(repr=False)
    draft_next_token: np.ndarray = field(repr=False)
    agreement: float


def build_pair(
    root: str | os.PathLike,
    *,
    agreement: float = 0.8,
    target: TinyModelSpec = TinyModelSpec(),
    draft: TinyModelSpec = TinyModelSpec(num_layers=1),
    vocab_size: int = 512,
    seed: int = 0,
    max_position_embeddings: int = 1024,
) -> TinyPair:
    """Build tokenizer, cyclic target and partial-agreement draft under ``root`` (cached by content;
    ``max_position_embeddings`` above 1024 for long prompts)."""
    root = Path(root)
    tag = f"v{vocab_size}-s{seed}-p{agreement}-t{target.num_layers}x{target.hidden_size}-d{draft.num_layers}x{draft.hidden_size}"
    if max_position_embeddings != 1024:  # the default keeps the paths models were built at
        tag += f"-pos{max_position_embeddings}"
    tdir, ddir, kdir = root / f"target-{tag}", root / f"draft-{tag}", root / f"tokenizer-v{vocab_size}"
    if not (kdir / "tokenizer.json").exists():
        build_tokenizer(kdir, vocab_size)
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(str(kdir)))
    f = cycle_map(vocab, len(SPECIAL_TOKENS), seed)
    g = partial_map(f, agreement, len(SPECIAL_TOKENS), seed)
    if not (tdir / "config.json").exists():
        build_cyclic_model(tdir, f, target, kdir, seed, max_position_embeddings)
    if not (ddir / "config.json").exists():
        build_cyclic_model(ddir, g, draft, kdir, seed + 100, max_position_embeddings)
    return TinyPair(str(tdir), str(ddir), f, g, agreement)
