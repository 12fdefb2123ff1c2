"""Command-line parity with tritonserver: --backend-config parsing and merging, Triton's other flags,
mistyped flags, and the strict-readiness rule (the end-to-end side is tests/e2e/test_cli_parity.py)."""

from __future__ import annotations

import argparse
import contextlib

import pytest

from inferd.contracts.errors import ConfigError
from inferd.contracts.flags import setting_flag, setting_integer
from inferd.engine.health import ServerHealth, all_versions_loaded, model_is_ready, unready_models
from inferd.engine.states import LOADING, READY, UNLOADED, UNLOADING, ModelRecord, State, VersionState, Why
from inferd.host import triton_flags
from inferd.host.arguments import SuggestingParser, backend_config_setting
from inferd.host.plugins import PluginHost
from inferd.host.registry import Registry
from inferd.host.serve_command import build_parser, options_from_args
from inferd.lifecycle.builder import backend_config_warnings, backend_settings

#: ``tritonserver --help`` of Triton 2.51 (the reference binary), every long option it lists.
TRITON_251_FLAGS = """
--id --exit-timeout-secs --log-verbose --log-info --log-warning --log-error --log-format --log-file
--model-store --model-repository --exit-on-error --disable-auto-complete-config --strict-readiness
--model-control-mode --repository-poll-secs --load-model --model-config-name --model-load-thread-count
--model-load-retry-count --model-namespacing --enable-peer-access --allow-http --http-address --http-port
--reuse-http-port --http-header-forward-pattern --http-thread-count --http-restricted-api --allow-grpc
--grpc-address --grpc-port --reuse-grpc-port --grpc-header-forward-pattern --grpc-infer-allocation-pool-size
--grpc-use-ssl --grpc-use-ssl-mutual --grpc-server-cert --grpc-server-key --grpc-root-cert
--grpc-infer-response-compression-level --grpc-keepalive-time --grpc-keepalive-timeout
--grpc-keepalive-permit-without-calls --grpc-http2-max-pings-without-data
--grpc-http2-min-recv-ping-interval-without-data --grpc-http2-max-ping-strikes --grpc-max-connection-age
--grpc-max-connection-age-grace --grpc-restricted-protocol --allow-sagemaker --sagemaker-port
--sagemaker-safe-port-range --sagemaker-thread-count --allow-vertex-ai --vertex-ai-port --vertex-ai-thread-count
--vertex-ai-default-model --allow-metrics --allow-gpu-metrics --allow-cpu-metrics --metrics-address --metrics-port
--metrics-interval-ms --metrics-config --trace-config --backend-directory --backend-config --repoagent-directory
--cache-config --cache-directory --rate-limit --rate-limit-resource --pinned-memory-pool-byte-size
--cuda-memory-pool-byte-size --cuda-virtual-address-size --min-supported-compute-capability
--buffer-manager-thread-count --host-policy --model-load-gpu-limit --strict-model-config
--response-cache-byte-size --trace-file --trace-level --trace-rate --trace-count --trace-log-frequency
"""


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("onnxruntime,default-max-batch-size=8", ("onnxruntime", "default-max-batch-size", "8")),
        ("default-max-batch-size=6", ("", "default-max-batch-size", "6")),
        ("python,shm-region-prefix-name=a,b=c", ("python", "shm-region-prefix-name", "a,b=c")),  # Triton keeps it whole
        ("key=a,b", ("", "key", "a,b")),
    ],
)
def test_backend_config_forms(value, parsed):
    assert backend_config_setting(value) == parsed


@pytest.mark.parametrize(
    ("value", "message"),
    [  # Triton 2.51's own messages for these (checked against tritonserver)
        (",default-max-batch-size=3", "No backend specified. --backend-config option format is <backend name>,"
                                      "<setting>=<value> or <setting>=<value>. Got ,default-max-batch-size=3"),
        ("default-max-batch-size=", "--backend-config option format is '<backend name>,<setting>=<value>'. "
                                    "Got default-max-batch-size="),
        ("default-max-batch-size", "--backend-config option format is '<backend name>,<setting>=<value>'. "
                                   "Got default-max-batch-size"),
        ("onnxruntime,=4", "Got onnxruntime,=4"),
    ],
)  # fmt: skip
def test_backend_config_format_errors(value, message):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        backend_config_setting(value)
    assert message in str(err.value)


def test_backend_specific_settings_override_global_ones_and_undeclared_keys_are_dropped():
    config = {"": {"default-max-batch-size": "7", "other": "x"}, "onnxruntime": {"default-max-batch-size": "8"}}
    keys = frozenset({"default-max-batch-size"})
    assert backend_settings(config, "onnxruntime", keys) == {"default-max-batch-size": "8"}
    assert backend_settings(config, "pytorch", keys) == {"default-max-batch-size": "7"}
    assert backend_settings({}, "pytorch", keys) == {}


def _backends() -> Registry[object]:
    reg: Registry[object] = Registry("backend", ("model_filenames", "settings"))
    reg.add("onnxruntime", object, "onnx", settings=("default-max-batch-size",))
    reg.add("python", object, "python")
    return reg


def test_settings_no_backend_reads_are_warned_about_one_line_each():
    config = {
        "": {"default-max-batch-size": "6", "min-compute-capability": "6.0"},
        "onnxruntime": {"default-max-batch-size": "5", "bogus": "1"},
        "python": {"shm-default-byte-size": "1048576"},
        "tensorflow": {"version": "2"},
    }
    assert backend_config_warnings(_backends(), config) == [  # type: ignore[arg-type]
        "--backend-config=min-compute-capability=6.0: no installed backend reads 'min-compute-capability'; ignored",
        "--backend-config=onnxruntime,bogus=1: the onnxruntime backend does not read 'bogus'; ignored",
        "--backend-config=python,shm-default-byte-size=1048576: the python backend does not read "
        "'shm-default-byte-size'; ignored",
        "--backend-config=tensorflow,version=2: no installed backend is named 'tensorflow'; ignored",
    ]


def test_typed_setting_readers_name_the_flag():
    settings = {"n": "12", "bad": "x", "neg": "-1", "on": "1", "off": "false", "maybe": "maybe"}
    assert setting_integer(settings, "onnxruntime", "n", 4) == 12
    assert setting_integer(settings, "onnxruntime", "absent", 4) == 4
    assert setting_flag(settings, "onnxruntime", "on", False) is True
    assert setting_flag(settings, "onnxruntime", "off", True) is False
    with pytest.raises(ConfigError, match=r"--backend-config=onnxruntime,bad=x: expected a whole number$"):
        setting_integer(settings, "onnxruntime", "bad", 4)
    with pytest.raises(ConfigError, match=r"onnxruntime,neg=-1: expected a whole number >= 0"):
        setting_integer(settings, "onnxruntime", "neg", 4)
    with pytest.raises(ConfigError, match=r"onnxruntime,maybe=maybe: expected true or false"):
        setting_flag(settings, "onnxruntime", "maybe", False)


def _serve_args(*argv: str) -> argparse.Namespace:
    return build_parser(PluginHost()).parse_args(["serve", "--model-repository", "/m", *argv])


@pytest.mark.parametrize("flag", TRITON_251_FLAGS.split())
def test_every_flag_of_tritonserver_help_is_known(flag, capsys):
    """Each flag parses (with some value) or is refused for its value, never as unrecognized."""
    with contextlib.suppress(SystemExit):
        _serve_args(f"{flag}=1")
    assert "unrecognized arguments" not in capsys.readouterr().err


def test_defaults_follow_triton_and_options_reach_the_server():
    options = options_from_args(_serve_args())
    assert (options.strict_readiness, options.exit_on_error, options.server_id) == (True, True, "inferd")
    options = options_from_args(_serve_args(
        "--strict-readiness", "false", "--exit-on-error=0", "--id=edge", "--backend-config=default-max-batch-size=2",
        "--backend-config", "onnxruntime,default-max-batch-size=3", "--backend-config=onnxruntime,default-max-batch-size=5",
        "--http-thread-count", "8", "--allow-sagemaker=true",
    ))  # fmt: skip
    assert (options.strict_readiness, options.exit_on_error, options.server_id) == (False, False, "edge")
    assert options.backend_config == {
        "": {"default-max-batch-size": "2"},
        "onnxruntime": {"default-max-batch-size": "5"},
    }
    assert not any(triton_flags.is_own_dest(k) for k in options.extra)


def test_not_applicable_flags_warn_once_per_use_in_both_forms():
    args = vars(_serve_args("--http-thread-count", "8", "--buffer-manager-thread-count=2", "--host-policy=a,numa-node=0",
                            "--host-policy", "b,cpu-cores=0-3", "--grpc-use-ssl=false"))  # fmt: skip
    lines = triton_flags.warnings(args)
    assert [line.split(" ", 1)[0] for line in lines] == [
        "--http-thread-count=8", "--buffer-manager-thread-count=2", "--host-policy=a,numa-node=0", "--host-policy=b,cpu-cores=0-3",
    ]  # fmt: skip
    assert all("does not apply to inferd (ignored): " in line for line in lines)


def test_a_mistyped_flag_names_the_closest_one_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        _serve_args("--strict-readyness=false")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [  # the suggestion first, then one line of usage (not several screens)
        "inferd serve: error: unrecognized arguments: --strict-readyness=false (did you mean --strict-readiness?)",
        "usage: inferd serve [OPTIONS]  (all options: inferd serve --help)",
    ]


def test_a_flag_nothing_resembles_gets_no_suggestion(capsys):
    parser = SuggestingParser(prog="p")
    parser.add_argument("--alpha")
    with pytest.raises(SystemExit):
        parser.parse_args(["--zzzzzzzz=1"])
    assert capsys.readouterr().err.splitlines() == ["p: error: unrecognized arguments: --zzzzzzzz=1",
                                                    "usage: p [-h] [--alpha ALPHA]"]  # fmt: skip


def _record(name: str, **versions: VersionState) -> ModelRecord:
    record = ModelRecord(name)
    record.versions = {int(v[1:]): s for v, s in versions.items()}
    return record


def test_strict_readiness_needs_a_serving_version_of_each_model():
    failed = VersionState(State.UNAVAILABLE, Why.LOAD_FAILED, "boom")
    reload_failed = VersionState(State.READY, Why.RELOAD_FAILED, "boom")  # the old version still serves
    removed = VersionState(State.UNAVAILABLE, Why.REMOVED)
    assert model_is_ready(_record("a", v1=READY, v2=UNLOADED, v3=removed, v4=reload_failed))
    assert model_is_ready(_record("b", v1=READY, v2=failed))  # a new version failed beside a serving one
    assert model_is_ready(_record("b", v1=READY, v2=LOADING))  # a new version loading beside a serving one
    assert model_is_ready(_record("u", v1=UNLOADED, v2=removed))  # every version left on purpose
    assert not model_is_ready(_record("f", v1=UNLOADED, v2=failed))  # nothing serves, and a load failed
    assert not model_is_ready(_record("c", v1=LOADING))
    assert not model_is_ready(_record("d", v1=UNLOADING))
    assert not model_is_ready(_record("e"))  # no version yet (being prepared) or a model-level failure
    records = [_record("z", v1=failed), _record("a", v1=READY), _record("m")]
    assert unready_models(records) == ["m", "z"]


def test_tritons_rule_fails_a_model_on_any_failed_version():
    failed = VersionState(State.UNAVAILABLE, Why.LOAD_FAILED, "boom")
    reload_failed = VersionState(State.READY, Why.RELOAD_FAILED, "boom")
    assert all_versions_loaded(_record("a", v1=READY, v2=UNLOADED, v3=reload_failed))
    assert not all_versions_loaded(_record("b", v1=READY, v2=failed))
    assert not all_versions_loaded(_record("c", v1=READY, v2=LOADING))
    assert not all_versions_loaded(_record("e"))


class _Table:
    def __init__(self) -> None:
        self.records: dict[str, ModelRecord] = {}
        self.poll_added: set[str] = set()


def test_server_health_is_strict_only_when_given_the_models():
    table = _Table()
    strict, lenient = ServerHealth(models=table), ServerHealth()
    for health in (strict, lenient):
        assert not health.ready()
        health.live = health.accepting = True
    table.records["broken"] = _record("broken", v1=VersionState(State.UNAVAILABLE, Why.LOAD_FAILED, "boom"))
    assert (strict.started, strict.ready(), lenient.ready()) == (True, False, True)
    table.poll_added.add("broken")  # a model that appeared under poll does not count
    assert strict.ready()
    table.poll_added.clear()
    table.records["broken"].versions[1] = UNLOADED  # Triton: a failed load stays counted until it loads
    assert strict.ready()
