"""Benchmarks: `python -m src.bench norms` (norm kernels) and `python -m src.bench train` (tokens/s, MFU)."""
