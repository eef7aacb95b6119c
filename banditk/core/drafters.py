"""Drafter classes.

A drafter class groups proposers whose cost shape and acceptance behaviour are
alike. Fitted latency or acceptance parameters never transfer across classes.
"""

from __future__ import annotations

from banditk.core.errors import UnknownDrafterClassError

#: Known drafter classes and what they cover.
DRAFTER_CLASSES: dict[str, str] = {
    "mtp": "native multi-token-prediction heads (Qwen3.6, GLM-5.2, Nemotron 3 Ultra, Hy3)",
    "mtp-step": "Step-3.7-Flash MTP: its own attention layout, so its own class",
    "mtp-external": "external MTP drafter model (Gemma 4)",
    "eagle": "EAGLE / EAGLE-3 heads (Mistral Medium 3.5)",
    "dflash": "DFlash block drafter: one parallel forward per block (Laguna S 2.1)",
    "draft_model": "an independent small draft model",
    "ngram": "prompt-lookup n-gram proposer (no device forward)",
    "suffix": "suffix-tree proposer (no device forward)",
}

#: vLLM ``speculative_config.method`` values and the class each maps to.
VLLM_METHOD_TO_CLASS: dict[str, str] = {
    "mtp": "mtp",
    "eagle": "eagle",
    "eagle3": "eagle",
    "draft_model": "draft_model",
    "ngram": "ngram",
    "ngram_gpu": "ngram",  # the same prompt lookup, run on the device
    "suffix": "suffix",
    "dflash": "dflash",
}


def check_drafter_class(name: object, field: str = "drafter_class") -> str:
    """Return ``name`` if it is a known drafter class, else raise.

    >>> check_drafter_class("mtp")
    'mtp'
    """
    if not isinstance(name, str) or name not in DRAFTER_CLASSES:
        known = ", ".join(sorted(DRAFTER_CLASSES))
        raise UnknownDrafterClassError(f"Unknown {field}={name!r}; expected one of: {known}.")
    return name
