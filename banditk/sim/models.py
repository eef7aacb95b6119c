"""Model profiles: what one forward pass of a target (and its drafter) moves and computes.

Parameter counts exclude the embedding and the LM head, which are listed apart
(``lm_head_params``) because a drafter that shares the target's LM head reads
it again on every draft forward. For MoE models the body splits into an
always-read part (attention, shared experts, norms) and routed experts; see
:meth:`ModelProfile.expert_params`. Every number has a source in ``sources``;
``"assumed"`` marks values not taken from a published config (most of the
2026 models have no public config this simulator could read; those rows are
extrapolated from their predecessor and say so).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from banditk.core.drafters import check_drafter_class
from banditk.core.errors import ConfigError


@dataclass(frozen=True)
class DrafterProfile:
    """The device cost shape of one drafter attached to a target.

    Attributes:
        drafter_class: one of :data:`banditk.core.drafters.DRAFTER_CLASSES`.
        params: parameters read per draft forward (excluding the LM head).
        bytes_per_param: storage bytes per parameter.
        n_layers: layers per draft forward (launch overheads in PIECEWISE mode).
        shares_lm_head: True if each draft forward reads the target's LM head.
        own_lm_head_params: LM head parameters of a drafter with its own head.
        cpu_s_per_request: host cost per request per step (ngram/suffix lookup).
        sources: field -> source.
    """

    drafter_class: str
    params: float = 0.0
    bytes_per_param: float = 2.0
    n_layers: int = 1
    shares_lm_head: bool = True
    own_lm_head_params: float = 0.0
    cpu_s_per_request: float = 0.0
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelProfile:
    """A target model for the roofline.

    Attributes:
        name: profile key.
        n_layers: decoder layers (PIECEWISE launch overhead is per layer).
        total_params: body parameters, all experts included.
        active_params: body parameters one token reads (routed top-k + dense part).
        n_experts: routed experts per MoE layer (0 for dense models).
        top_k: routed experts per token.
        bytes_per_param: average storage bytes of body weights.
        lm_head_params: vocabulary x hidden.
        lm_head_bytes_per_param: storage bytes of the LM head.
        kv_bytes_per_token: KV-cache bytes per token over all full-attention layers.
        swa_kv_bytes_per_token: KV bytes per token of sliding-window layers.
        swa_window: sliding window length (tokens) of those layers.
        state_bytes_per_request: recurrent state (linear attention / Mamba) read
            and written per request per step.
        routing_token_exponent: distinct-expert growth uses ``tokens ** exponent``
            independent draws; 1.0 is uniform independent routing, smaller values
            model tokens of one sequence sharing experts.
        drafters: drafter class -> cost shape. Empty for models served without
            a configured speculative mechanism.
        sources: field -> source.
        max_model_len: the model's context limit in tokens (0: not known, no limit checked).
    """

    name: str
    n_layers: int
    total_params: float
    active_params: float
    n_experts: int
    top_k: int
    bytes_per_param: float
    lm_head_params: float
    lm_head_bytes_per_param: float
    kv_bytes_per_token: float
    swa_kv_bytes_per_token: float = 0.0
    swa_window: int = 0
    state_bytes_per_request: float = 0.0
    routing_token_exponent: float = 1.0
    drafters: dict[str, DrafterProfile] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    max_model_len: int = 0

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0 and self.top_k < self.n_experts

    @property
    def expert_params(self) -> float:
        """Parameters of one routed expert summed over all MoE layers."""
        if not self.is_moe:
            return 0.0
        return (self.total_params - self.active_params) / (self.n_experts - self.top_k)

    @property
    def dense_params(self) -> float:
        """Body parameters every forward reads regardless of routing."""
        return self.active_params - self.top_k * self.expert_params

    def drafter(self, drafter_class: str) -> DrafterProfile:
        """The drafter of class ``drafter_class``, or a ConfigError naming the choices."""
        check_drafter_class(drafter_class, "drafter.class")
        if drafter_class not in self.drafters:
            have = ", ".join(sorted(self.drafters)) or "none (no speculative mechanism configured)"
            raise ConfigError(f"Model {self.name!r} has no `drafter.class`={drafter_class!r} row; it has: {have}.")
        return self.drafters[drafter_class]


def _ngram(cls: str = "ngram") -> DrafterProfile:
    return DrafterProfile(
        drafter_class=cls,
        params=0.0,
        n_layers=0,
        shares_lm_head=False,
        cpu_s_per_request=15e-6,
        sources={"cpu_s_per_request": "assumed: host-side n-gram / suffix lookup"},
    )


def _mtp(cls: str, params: float, bpp: float, src: str) -> DrafterProfile:
    return DrafterProfile(
        drafter_class=cls,
        params=params,
        bytes_per_param=bpp,
        n_layers=1,
        shares_lm_head=True,
        sources={"params": src, "bytes_per_param": "assumed: same quantisation as the target body"},
    )


_A = "assumed: extrapolated from {} (no public config for this release)"

MODELS: dict[str, ModelProfile] = {}


def _add(m: ModelProfile) -> None:
    MODELS[m.name] = m


_add(
    ModelProfile(
        name="qwen3.5-122b-a10b-int4",
        n_layers=48,
        total_params=120.5e9,
        active_params=8.5e9,
        n_experts=256,
        top_k=8,
        bytes_per_param=0.55,
        lm_head_params=0.76e9,
        lm_head_bytes_per_param=1.0,
        kv_bytes_per_token=24576,
        state_bytes_per_request=25e6,
        routing_token_exponent=0.6,
        drafters={
            "mtp": _mtp(
                "mtp",
                0.20e9,
                0.55,
                "assumed: one MTP decoder layer (attention + top-8 MoE) of ~1/48 of the active body",
            ),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            "total_params": "Qwen3.5-122B-A10B model card: 122B total, minus embedding and LM head",
            "active_params": "Qwen3.5-122B-A10B model card: 10B active, minus embedding and LM head",
            "n_layers": "assumed: Qwen3.5 hybrid layout, 48 layers (36 Gated DeltaNet + 12 full attention)",
            "n_experts": "assumed: 256 routed experts",
            "top_k": "assumed: 8 routed (+1 shared, in the dense part)",
            "bytes_per_param": "assumed: INT4 group-128 weights with bf16 attention, 0.55 B/param average",
            "lm_head_params": "assumed: 248k vocab x 3072 hidden",
            "lm_head_bytes_per_param": "calibrated: 8-bit LM head fits #49548 single stream (bf16 gives 46 tok/s)",
            "kv_bytes_per_token": "assumed: 12 full-attention layers x K,V x 2 KV heads x 256 dim x bf16",
            "state_bytes_per_request": "assumed: Gated DeltaNet recurrent state of 36 layers",
            "routing_token_exponent": "calibrated: #49548 static K=2 at c=8 ~232 tok/s vs 59.6 tok/s single stream",
        },
    )
)
_add(
    ModelProfile(
        name="qwen3.6-35b-a3b",
        n_layers=40,
        total_params=34e9,
        active_params=2.6e9,
        n_experts=256,
        top_k=8,
        bytes_per_param=2.0,
        lm_head_params=0.5e9,
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=20480,
        state_bytes_per_request=15e6,
        routing_token_exponent=0.6,
        drafters={
            "mtp": _mtp("mtp", 0.07e9, 2.0, _A.format("Qwen3.5-35B-A3B's one MTP layer")),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            k: _A.format("Qwen3.5-35B-A3B")
            for k in (
                "n_layers",
                "total_params",
                "active_params",
                "n_experts",
                "top_k",
                "bytes_per_param",
                "lm_head_params",
                "lm_head_bytes_per_param",
                "kv_bytes_per_token",
                "state_bytes_per_request",
                "routing_token_exponent",
            )
        },
    )
)
_add(
    ModelProfile(
        name="glm-5.2",
        n_layers=78,
        total_params=740e9,
        active_params=38e9,
        n_experts=256,
        top_k=8,
        bytes_per_param=1.0,
        lm_head_params=0.9e9,
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=45000,
        routing_token_exponent=0.6,
        drafters={
            "mtp": _mtp("mtp", 0.5e9, 1.0, _A.format("GLM-5's one MTP layer")),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            k: _A.format("GLM-5 (744B total, ~40B active, FP8)")
            for k in (
                "n_layers",
                "total_params",
                "active_params",
                "n_experts",
                "top_k",
                "bytes_per_param",
                "lm_head_params",
                "lm_head_bytes_per_param",
                "kv_bytes_per_token",
                "routing_token_exponent",
            )
        },
    )
)
_add(
    ModelProfile(
        name="nemotron-3-ultra",
        n_layers=88,
        total_params=500e9,
        active_params=48e9,
        n_experts=512,
        top_k=22,
        bytes_per_param=0.56,
        lm_head_params=0.7e9,
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=16384,
        state_bytes_per_request=40e6,
        routing_token_exponent=0.6,
        drafters={
            "mtp": _mtp("mtp", 0.6e9, 0.56, _A.format("Nemotron 3 Super's MTP layers")),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            k: _A.format("NVIDIA's Nemotron 3 announcement (~500B hybrid Mamba-MoE, NVFP4)")
            for k in (
                "n_layers",
                "total_params",
                "active_params",
                "n_experts",
                "top_k",
                "bytes_per_param",
                "lm_head_params",
                "lm_head_bytes_per_param",
                "kv_bytes_per_token",
                "state_bytes_per_request",
                "routing_token_exponent",
            )
        },
    )
)
_add(
    ModelProfile(
        name="hy3",
        n_layers=64,
        total_params=290e9,
        active_params=20e9,
        n_experts=192,
        top_k=8,
        bytes_per_param=1.0,
        lm_head_params=0.8e9,
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=32768,
        routing_token_exponent=0.6,
        drafters={
            "mtp": _mtp("mtp", 0.35e9, 1.0, _A.format("Hunyuan MTP layer")),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            k: _A.format("Hunyuan-A13B / Hunyuan-Large")
            for k in (
                "n_layers",
                "total_params",
                "active_params",
                "n_experts",
                "top_k",
                "bytes_per_param",
                "lm_head_params",
                "lm_head_bytes_per_param",
                "kv_bytes_per_token",
                "routing_token_exponent",
            )
        },
    )
)
_add(
    ModelProfile(
        name="step-3.7-flash",
        n_layers=45,
        total_params=194e9,
        active_params=10e9,
        n_experts=288,
        top_k=8,
        bytes_per_param=1.0,
        lm_head_params=0.8e9,
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=12 * 2 * 8 * 128 * 2,
        swa_kv_bytes_per_token=33 * 2 * 8 * 128 * 2,
        swa_window=512,
        routing_token_exponent=0.6,
        drafters={
            "mtp-step": _mtp("mtp-step", 0.25e9, 1.0, _A.format("Step-3.5-Flash's MTP-3 heads")),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            **{
                k: _A.format("Step-3.5-Flash (196B total, 11B active, 288 experts)")
                for k in (
                    "n_layers",
                    "total_params",
                    "active_params",
                    "n_experts",
                    "top_k",
                    "bytes_per_param",
                    "lm_head_params",
                    "lm_head_bytes_per_param",
                    "routing_token_exponent",
                )
            },
            "kv_bytes_per_token": _A.format("Step-3.5-Flash: 1 in 4 layers full attention"),
            "swa_kv_bytes_per_token": _A.format("Step-3.5-Flash: 3 in 4 layers sliding-window attention"),
            "swa_window": _A.format("Step-3.5-Flash: window 512"),
        },
    )
)
_add(
    ModelProfile(
        name="gemma-4",
        n_layers=62,
        total_params=30e9,
        active_params=30e9,
        n_experts=0,
        top_k=0,
        bytes_per_param=2.0,
        lm_head_params=0.0,
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=10 * 2 * 16 * 128 * 2,
        swa_kv_bytes_per_token=52 * 2 * 16 * 128 * 2,
        swa_window=1024,
        drafters={
            "mtp-external": DrafterProfile(
                drafter_class="mtp-external",
                params=0.4e9,
                bytes_per_param=2.0,
                n_layers=4,
                shares_lm_head=False,
                own_lm_head_params=0.26e9,
                sources={"params": _A.format("an external 4-layer MTP drafter"), "own_lm_head_params": "assumed"},
            ),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            k: _A.format("Gemma 3 27B (5:1 local:global attention, tied embeddings)")
            for k in (
                "n_layers",
                "total_params",
                "active_params",
                "bytes_per_param",
                "lm_head_params",
                "lm_head_bytes_per_param",
                "kv_bytes_per_token",
                "swa_kv_bytes_per_token",
                "swa_window",
            )
        },
    )
)
# Gemma 4 31B (dense), the FP8 checkpoint of vLLM #48944 / #49986 (`prithivMLmods/gemma-4-31B-it-qat-FP8`)
# with its assistant drafter (`google/gemma-4-31B-it-qat-q4_0-unquantized-assistant`, vLLM's
# Gemma 4 MTP path, #41745): 60 layers, 50 sliding-window (window 1024, 16 KV heads x 256) and
# 10 global (4 KV heads x 512), hidden 5376, MLP 21504, 262,144-token vocabulary (tied).
_G4_HIDDEN, _G4_MLP, _G4_VOCAB = 5376, 21504, 262144
_G4_MLP_PARAMS = 3 * _G4_HIDDEN * _G4_MLP  # gate, up, down
_G4_SWA_ATTN = _G4_HIDDEN * 32 * 256 * 2 + _G4_HIDDEN * 16 * 256 * 2  # q, o (32 heads x 256) + k, v
_G4_GLOBAL_ATTN = _G4_HIDDEN * 32 * 512 * 2 + _G4_HIDDEN * 4 * 512  # q, o (32 heads x 512) + shared k = v
_G4_BODY = 50 * (_G4_MLP_PARAMS + _G4_SWA_ATTN) + 10 * (_G4_MLP_PARAMS + _G4_GLOBAL_ATTN)
_G4_SRC = "vLLM #39407 (Gemma 4 31B: 50 sliding layers window 1024, head_dim 256, 16 KV heads; 10 global, head_dim 512, 4 KV heads, k_eq_v)"
_add(
    ModelProfile(
        name="gemma-4-31B-it-qat-FP8",
        n_layers=60,
        total_params=float(_G4_BODY),
        active_params=float(_G4_BODY),
        n_experts=0,
        top_k=0,
        bytes_per_param=1.0,
        lm_head_params=float(_G4_VOCAB * _G4_HIDDEN),
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=10 * 2 * 4 * 512 * 2,
        swa_kv_bytes_per_token=50 * 2 * 16 * 256 * 2,
        swa_window=1024,
        max_model_len=262144,
        drafters={
            "mtp-external": DrafterProfile(
                drafter_class="mtp-external",
                params=0.45e9,
                bytes_per_param=2.0,
                n_layers=4,
                shares_lm_head=True,
                sources={
                    "params": "assumed: 4 decoder layers at hidden 5376 with Q-only attention (vLLM #41745: the "
                    "assistant shares the target's KV cache), ~0.45B; 'unquantized' checkpoint, bf16",
                    "n_layers": "assumed: 4 layers",
                    "shares_lm_head": "assumed: the 262k-vocabulary head is read by every draft forward "
                    "(no centroid masking on the 31B assistant, vLLM #41745)",
                },
            ),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            "n_layers": _G4_SRC,
            "total_params": "derived: " + _G4_SRC + "; hidden 5376 and MLP 21504 from modular #6814; "
            "32 query heads assumed; ~29.3B without the embedding",
            "active_params": "dense",
            "bytes_per_param": "vLLM #48944: FP8 (W8A8) checkpoint gemma-4-31B-it-qat-FP8",
            "lm_head_params": "derived: 262,144 vocabulary (Gemma 3/4 tokenizer) x hidden 5376, tied embedding",
            "lm_head_bytes_per_param": "assumed: the tied embedding / LM head stays bf16 in the FP8 checkpoint",
            "kv_bytes_per_token": "derived: " + _G4_SRC + "; K and V both stored (assumed), bf16 cache (vLLM default)",
            "swa_kv_bytes_per_token": "derived: 50 sliding layers x K,V x 16 heads x 256 x bf16 "
            "(turboderp, exllamav3 #191: ~800 kB per token naive)",
            "swa_window": _G4_SRC,
            "max_model_len": "tenstorrent tt-metal #43347: 256k context for Gemma 4 31B (262,144)",
        },
    )
)
_add(
    ModelProfile(
        name="mistral-medium-3.5",
        n_layers=88,
        total_params=120e9,
        active_params=120e9,
        n_experts=0,
        top_k=0,
        bytes_per_param=1.0,
        lm_head_params=1.6e9,
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=88 * 2 * 8 * 128 * 2,
        drafters={
            "eagle": DrafterProfile(
                drafter_class="eagle",
                params=1.5e9,
                bytes_per_param=1.0,
                n_layers=1,
                shares_lm_head=True,
                sources={"params": _A.format("an EAGLE-3 head of one decoder layer")},
            ),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            k: _A.format("Mistral Large 2 (123B dense, FP8)")
            for k in (
                "n_layers",
                "total_params",
                "active_params",
                "bytes_per_param",
                "lm_head_params",
                "lm_head_bytes_per_param",
                "kv_bytes_per_token",
            )
        },
    )
)
_add(
    ModelProfile(
        name="laguna-s-2.1",
        n_layers=40,
        total_params=32e9,
        active_params=3.0e9,
        n_experts=128,
        top_k=8,
        bytes_per_param=1.0,
        lm_head_params=0.4e9,
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=40 * 2 * 4 * 128 * 2,
        routing_token_exponent=0.6,
        drafters={
            "dflash": DrafterProfile(
                drafter_class="dflash",
                params=0.5e9,
                bytes_per_param=2.0,
                n_layers=5,
                shares_lm_head=True,
                sources={"params": _A.format("DFlash block drafters (5 layers, one parallel forward)")},
            ),
            "ngram": _ngram(),
            "suffix": _ngram("suffix"),
        },
        sources={
            k: _A.format("a 32B-A3B MoE")
            for k in (
                "n_layers",
                "total_params",
                "active_params",
                "n_experts",
                "top_k",
                "bytes_per_param",
                "lm_head_params",
                "lm_head_bytes_per_param",
                "kv_bytes_per_token",
                "routing_token_exponent",
            )
        },
    )
)

# 4-bit weight-only quantizations (AWQ/GPTQ-style, group-128 fp16 scales): how models too
# large for a 128 GB box in FP8 are run on DGX Spark / Strix Halo.
_INT4_BPP = 0.53
for _base in ("step-3.7-flash", "mistral-medium-3.5"):
    _m = MODELS[_base]
    _add(
        dataclasses.replace(
            _m,
            name=f"{_base}-int4",
            bytes_per_param=_INT4_BPP,
            sources={**_m.sources, "bytes_per_param": "assumed: 4-bit weights + group-128 fp16 scales (0.53 B/param)"},
        )
    )

# Served without a configured speculative mechanism: no drafter-class row.
for _name, _tot, _act, _e, _k, _bpp, _layers, _pred in (
    ("gpt-oss-120b", 115.6e9, 4.0e9, 128, 4, 0.56, 36, "OpenAI gpt-oss model card (116.8B total, 5.1B active)"),
    ("kimi-k3", 1030e9, 31e9, 384, 8, 0.56, 61, "Kimi K2 (1.04T total, 32B active, INT4 QAT)"),
    ("minimax-m3", 228e9, 9.5e9, 256, 8, 1.0, 62, "MiniMax-M2 (230B total, 10B active)"),
    ("granite-4.1", 31e9, 8.5e9, 72, 10, 2.0, 40, "Granite 4.0 H-Small (32B total, 9B active)"),
    ("inkling", 100e9, 100e9, 0, 0, 1.0, 80, "a 100B dense model (no public detail)"),
    ("mimo-v2.5", 306e9, 14.5e9, 256, 8, 1.0, 48, "MiMo-V2-Flash (309B total, 15B active)"),
):
    _add(
        ModelProfile(
            name=_name,
            n_layers=_layers,
            total_params=_tot,
            active_params=_act,
            n_experts=_e,
            top_k=_k,
            bytes_per_param=_bpp,
            lm_head_params=0.6e9,
            lm_head_bytes_per_param=2.0,
            kv_bytes_per_token=30000,
            routing_token_exponent=0.6 if _e else 1.0,
            sources={
                k: (_A.format(_pred) if _name != "gpt-oss-120b" else f"derived: {_pred}; rest assumed")
                for k in (
                    "n_layers",
                    "total_params",
                    "active_params",
                    "n_experts",
                    "top_k",
                    "bytes_per_param",
                    "lm_head_params",
                    "lm_head_bytes_per_param",
                    "kv_bytes_per_token",
                    "routing_token_exponent",
                )
            },
        )
    )

# Tiny cyclic models of VLLM_ON_CPU.md (fp32, hidden 1024; the 1-layer x 1024 draft model),
# and the live sweep's (experiments/live_sweep.py: 4 layers, its 512-token local vocabulary).
for _layers, _vocab, _suffix in ((4, 4096, ""), (10, 4096, ""), (4, 512, "-v512")):
    _vocab_src = (
        "assumed: 4k-token local BPE vocabulary"
        if _vocab == 4096
        else "banditk.testing.tiny_models: 512-token local tokenizer of the live sweep"
    )
    _add(
        ModelProfile(
            name=f"cyclic-{_layers}x1024{_suffix}",
            n_layers=_layers,
            total_params=_layers * 16.8e6,
            active_params=_layers * 16.8e6,
            n_experts=0,
            top_k=0,
            bytes_per_param=4.0,
            lm_head_params=_vocab * 1024.0,
            lm_head_bytes_per_param=4.0,
            kv_bytes_per_token=_layers * 2 * 1024 * 4,
            drafters={
                "draft_model": DrafterProfile(
                    drafter_class="draft_model",
                    params=16.8e6,
                    bytes_per_param=4.0,
                    n_layers=1,
                    shares_lm_head=False,
                    own_lm_head_params=_vocab * 1024.0,
                    sources={
                        "params": "VLLM_ON_CPU.md: 1 layer x hidden 1024 (4x MLP assumed)",
                        "own_lm_head_params": _vocab_src,
                    },
                ),
                "ngram": _ngram(),
                "suffix": _ngram("suffix"),
            },
            sources={
                "n_layers": "VLLM_ON_CPU.md",
                "total_params": "derived: 4*1024^2 attention + 3*1024*4096 MLP per layer (MLP width assumed)",
                "active_params": "dense",
                "n_experts": "dense",
                "top_k": "dense",
                "bytes_per_param": "VLLM_ON_CPU.md: dtype float32",
                "lm_head_params": _vocab_src,
                "lm_head_bytes_per_param": "float32",
                "kv_bytes_per_token": "derived: layers x K,V x 1024 x fp32",
            },
        )
    )


def get_model(name: object) -> ModelProfile:
    """Return the model profile called ``name``.

    >>> get_model("qwen3.5-122b-a10b-int4").top_k
    8
    """
    if not isinstance(name, str) or name not in MODELS:
        raise ConfigError(f"Unknown `model`={name!r}; expected one of: {', '.join(sorted(MODELS))}.")
    return MODELS[name]
