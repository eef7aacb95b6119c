"""banditk: a load-aware Bayesian speculative-depth governor for vLLM."""

__version__ = "0.1.0"
