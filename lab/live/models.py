"""Random-weight models of realistic shape, built on the machine (no model hub).

Real timings are what a K decision depends on; acceptance is set synthetically
(vLLM's ``rejection_sample_method="synthetic"``), so the weights need not be trained.
"""

from __future__ import annotations

from pathlib import Path

#: Llama-3-8B dimensions, and a one-layer drafter of the same width.
SHAPES = {
    "llama3-8b": dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8
    ),
    "llama3-8b-draft": dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=8
    ),
    # The same structure at toy size: the CPU smoke test of the GPU script.
    "tiny": dict(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
    "tiny-draft": dict(
        hidden_size=128, intermediate_size=256, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2
    ),
}


def build_random_llama(
    out_dir: str | Path,
    shape: str,
    tokenizer_dir: str | Path,
    dtype: str = "bfloat16",
    seed: int = 0,
    device: str = "cpu",
) -> str:
    """Write a random-weight Llama of ``shape`` with the tokenizer from ``tokenizer_dir``; cached by folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    if (out / "config.json").exists():
        return str(out)
    if shape not in SHAPES:
        raise ValueError(f"Unknown model shape {shape!r}; expected one of {sorted(SHAPES)}.")
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    cfg = LlamaConfig(
        vocab_size=len(tok),
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        torch_dtype=dtype,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
        **SHAPES[shape],
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    return str(out)
