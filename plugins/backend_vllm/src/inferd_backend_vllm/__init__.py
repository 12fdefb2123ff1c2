"""inferd's vLLM backend: Triton's vLLM backend model layout, driven by vLLM's async engine."""
