"""Tiny local vLLM models and engines for live runs, demos and the adapter tests (need the ``cpu`` extra)."""
