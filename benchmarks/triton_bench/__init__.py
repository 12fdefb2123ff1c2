"""Helpers of ``benchmarks/vs_triton.py``: models, request bodies, servers, load generators, table."""
