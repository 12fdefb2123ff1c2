"""``--backend-config=onnxruntime,...``: what the backend reads and how sessions use it (no server;
tests/e2e/test_cli_parity.py runs them through ``inferd serve``)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from inferd.config import ModelConfig
from inferd.contracts.errors import ConfigError
from inferd_backend_onnx.options import BACKEND_SETTINGS, BackendOptions, backend_options, session_settings


def test_defaults_are_tritons():
    assert backend_options({}) == BackendOptions(default_max_batch_size=4, global_threadpool=False)
    assert set(BACKEND_SETTINGS) == {"default-max-batch-size", "enable-global-threadpool", "intra_op_thread_count",
                                     "inter_op_thread_count"}  # fmt: skip


def test_settings_are_read_and_bad_ones_name_the_flag():
    opts = backend_options({"default-max-batch-size": "16", "enable-global-threadpool": "1",
                            "intra_op_thread_count": "3", "inter_op_thread_count": "2"})  # fmt: skip
    assert opts == BackendOptions(16, True, 3, 2)
    with pytest.raises(ConfigError, match="--backend-config=onnxruntime,enable-global-threadpool=sometimes"):
        backend_options({"enable-global-threadpool": "sometimes"})


def test_with_the_global_pools_the_models_thread_counts_are_ignored_as_in_triton():
    config = text_format.Parse(
        'parameters { key: "intra_op_thread_count" value { string_value: "3" } }\n'
        'parameters { key: "inter_op_thread_count" value { string_value: "2" } }\n', ModelConfig()
    )  # fmt: skip
    own = session_settings(config, "m")
    shared = session_settings(config, "m", shared_threads=True)
    assert (own.shared_threads, own.intra_op_threads, own.inter_op_threads) == (False, 3, 2)
    assert (shared.shared_threads, shared.intra_op_threads, shared.inter_op_threads) == (True, 0, 0)
