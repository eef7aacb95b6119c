"""Tests of the vLLM adapter (banditk.adapter)."""
