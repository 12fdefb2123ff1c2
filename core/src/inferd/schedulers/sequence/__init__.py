"""Triton's sequence batcher: the batcher and its control tensors."""
