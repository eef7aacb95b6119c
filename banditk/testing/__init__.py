"""Test helpers: synthetic streams (core only), and tiny vLLM models and engines (need the ``cpu`` extra)."""
