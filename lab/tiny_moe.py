"""A tiny Mixtral target whose greedy output is the cyclic target's: a MoE model for data-parallel tests.

vLLM steps the data-parallel ranks of a MoE model in lockstep (its experts are shared across
ranks), so what banditk does under data parallelism differs for MoE and dense models. The
model here routes every token through real experts (4 experts, top 2, random router and
gate/up projections) whose down projections are zero, as are the attention outputs: the
residual stream keeps the token's embedding, and the LM head maps it to ``next_token[token]``
exactly as the dense cyclic target does (banditk/testing/tiny_models.py). A dense draft built
on the same map (``build_pair``) then drafts for it with the pair's agreement.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from banditk.testing.tiny_models import TinyModelSpec, _cyclic_weights, build_pair


def build_moe_target(
    out_dir: str | os.PathLike,
    next_token: np.ndarray,
    tokenizer_dir: str | os.PathLike,
    spec: TinyModelSpec = TinyModelSpec(),
    *,
    num_experts: int = 4,
    experts_per_token: int = 2,
    seed: int = 0,
) -> str:
    """Save the Mixtral target (fp32 safetensors, per-expert checkpoint layout) under ``out_dir``."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    h = spec.hidden_size
    cfg = MixtralConfig(
        vocab_size=int(next_token.size),
        hidden_size=h,
        intermediate_size=spec.intermediate_size or 2 * h,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        num_local_experts=num_experts,
        num_experts_per_tok=experts_per_token,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = MixtralForCausalLM(cfg).to(torch.float32)
    emb, head = _cyclic_weights(next_token, h, seed, cfg.rms_norm_eps)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.from_numpy(emb).float())
        model.lm_head.weight.copy_(torch.from_numpy(head).float())
        model.model.norm.weight.fill_(1.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.experts.down_proj.zero_()  # routed, computed, and adds nothing
    out = Path(out_dir)
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)  # no sampling defaults: tests choose
    for name in os.listdir(tokenizer_dir):
        (out / name).write_bytes((Path(tokenizer_dir) / name).read_bytes())
    return str(out)


def build_moe_pair(root: str | os.PathLike, *, agreement: float = 0.8, seed: int = 0):
    """The dense tiny pair's tokenizer and draft, with a Mixtral target on the same map (cached).

    Returns ``(target_dir, pair)``: ``pair`` is :func:`build_pair`'s, whose ``next_token`` the
    Mixtral target follows too.
    """
    pair = build_pair(root, agreement=agreement, seed=seed)
    target = Path(root) / f"mixtral-v512-s{seed}-e4k2"
    if not (target / "config.json").exists():
        build_moe_target(target, pair.next_token, Path(root) / "tokenizer-v512", seed=seed)
    return str(target), pair
