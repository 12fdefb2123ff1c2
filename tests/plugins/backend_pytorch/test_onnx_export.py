"""The llm tier installs ``backend_pytorch[onnx]``: ``torch.onnx.export``'s default exporter (torch
>= 2.9) imports onnxscript; the exported model serves with the onnxruntime backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferd.testing import InProcessServer


def test_torch_onnx_export_default_exporter_writes_a_model_inferd_serves(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript", reason="backend_pytorch[onnx] is not installed")
    onnx_backend = pytest.importorskip("inferd_backend_onnx.hooks")
    httpx = pytest.importorskip("httpx")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    path = tmp_path / "models" / "exported" / "1" / "model.onnx"
    path.parent.mkdir(parents=True)
    x = torch.randn(2, 4)
    torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"],
                      dynamic_shapes=({0: torch.export.Dim("batch")},))  # fmt: skip
    (path.parent.parent / "config.pbtxt").write_text("max_batch_size: 8\n")
    with InProcessServer([tmp_path / "models"], plugins=[onnx_backend]) as server:
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": x.flatten().tolist()}]}
        out = httpx.post(f"http://{server.http_url}/v2/models/exported/infer", json=body, timeout=30).json()
    expected = model(x).detach().numpy()
    np.testing.assert_allclose(np.array(out["outputs"][0]["data"]).reshape(2, 3), expected, rtol=1e-5, atol=1e-6)
