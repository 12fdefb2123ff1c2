"""The backend contract: one test class every backend plugin can subclass.

A subclass names the inputs of one model and writes that model; the contract starts one real
server for the whole class (``inferd serve`` in a subprocess with the installed plugins, or an
in-process server with the plugin objects in :attr:`BackendContract.plugins`) and checks, over
HTTP and gRPC with the official ``tritonclient``: load (ready, metadata matching the config),
inference against the values the subclass computes with numpy, batches and concurrent requests,
reload through the repository API, unload, and bad requests::

    from inferd.testing import BackendContract, ContractModel, InputSpec

    class TestMyBackendContract(BackendContract):
        inputs = [InputSpec("INPUT0", "FP32", (4,))]

        def contract_repository(self, root):
            write_repository(root, {"double": {"config.pbtxt": CONFIG, "1/model.x": b"..."}})
            return ContractModel("double", lambda x: {"OUTPUT0": x["INPUT0"] * 2})
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np
import pytest

from inferd.testing.clients import CallError, ProtocolClient
from inferd.testing.servers import InProcessServer, ServerProcess

Expected = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class InputSpec:
    """An input the contract sends: wire ``datatype`` and the concrete ``shape`` of one row.

    ``shape`` leaves out the batch dimension when the model batches; where the config says -1,
    give the size the tests should send. An ``optional`` input is never left out on purpose.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    optional: bool = False


class ContractModel(NamedTuple):
    """What ``contract_repository`` returns: the model's name and its expected outputs."""

    name: str
    #: ``expected(inputs) -> {output name: array}``, computed with numpy from the inputs sent
    #: (with the batch dimension when the model batches).
    expected: Expected


def make_inputs(specs: Sequence[InputSpec], rows: int | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic test data for ``specs``; ``rows`` adds a batch dimension (None: none)."""
    from inferd.datatypes import numpy_dtype

    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        shape = ((rows,) if rows is not None else ()) + tuple(spec.shape)
        dtype = numpy_dtype(spec.datatype)
        if spec.datatype == "BYTES":
            flat = [f"{spec.name}-{seed}-{i}".encode() for i in range(int(np.prod(shape, dtype=np.int64)))]
            array: np.ndarray = np.array(flat, dtype=np.object_).reshape(shape)
        elif spec.datatype == "BOOL":
            array = rng.random(shape) > 0.5
        elif dtype.kind == "f":
            array = rng.uniform(-4.0, 4.0, shape).astype(dtype)
        elif dtype.kind == "u":
            array = rng.integers(0, 50, shape).astype(dtype)
        else:
            array = rng.integers(-50, 50, shape).astype(dtype)
        out[spec.name] = array
    return out


@dataclass
class ContractServer:
    """The server a contract class runs against, and the model it serves."""

    server: ServerProcess | InProcessServer
    repository: Path
    model: str
    expected: Expected
    config: dict[str, Any]
    grpc: bool

    @property
    def http_url(self) -> str:
        return self.server.http_url

    @property
    def grpc_url(self) -> str:
        return self.server.grpc_url

    @property
    def max_batch_size(self) -> int:
        return int(self.config.get("max_batch_size", 0))

    def log(self) -> str:
        log = getattr(self.server, "log", None)
        return log()[-6000:] if callable(log) else "(in-process server: see the captured log)"


def _port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _wire(config_type: str) -> str:
    name = config_type[5:] if config_type.startswith("TYPE_") else config_type
    return "BYTES" if name == "STRING" else name


class BackendContract:
    """Subclass as ``Test<Backend>Contract``; set :attr:`inputs` and define :meth:`contract_repository`.

    One server starts per subclass (class-scoped fixture) in explicit model-control mode.
    ``plugins = None`` (the default) runs ``inferd serve`` in a subprocess with the installed
    plugins; a list of plugin objects runs an in-process server with exactly those.
    """

    #: The inputs the tests send, in the model's order.
    inputs: ClassVar[Sequence[InputSpec]] = ()
    #: None: a subprocess with installed plugins; a list: an in-process server with these plugins.
    plugins: ClassVar[Sequence[Any] | None] = None
    #: Extra ``inferd serve`` flags (subprocess) and environment variables.
    server_args: ClassVar[Sequence[str]] = ()
    server_env: ClassVar[Mapping[str, str]] = {}
    #: Tolerances for floating-point outputs.
    rtol: ClassVar[float] = 1e-5
    atol: ClassVar[float] = 1e-6
    #: Requests sent at once by the concurrency test.
    concurrent_requests: ClassVar[int] = 8

    def contract_repository(self, root: Path) -> ContractModel | tuple[str, Expected]:
        """Write ONE model of the backend under ``root``; return its name and expected outputs."""
        raise NotImplementedError(f"{type(self).__name__} must define contract_repository(root)")

    # -- fixtures ----------------------------------------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def contract_server(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContractServer]:
        if not cls.inputs:
            raise TypeError(f"{cls.__name__} must set 'inputs' (a list of InputSpec)")
        root = tmp_path_factory.mktemp(f"contract-{cls.__name__}") / "models"
        root.mkdir()
        name, expected = cls().contract_repository(root)
        server = cls._start_server(root)
        try:
            http = ProtocolClient("http", server.http_url, server.grpc_url)
            try:
                http.load(name)
            except CallError as exc:
                raise AssertionError(
                    f"contract model '{name}' failed to load: {exc.message}\n"
                    f"repository index: {http.repository_index()}\n{_log(server)}"
                ) from None
            config = http.client.get_model_config(name)
            http.close()
            yield ContractServer(server, root, name, expected, config, _port_open(server.grpc_url))
        finally:
            server.stop()

    @classmethod
    def _start_server(cls, root: Path) -> ServerProcess | InProcessServer:
        if cls.plugins is not None:
            from inferd.lifecycle.manager import ControlMode

            return InProcessServer([root], plugins=cls.plugins, model_control_mode=ControlMode.EXPLICIT).start()
        args = ["--model-control-mode=explicit", *cls.server_args]
        return ServerProcess([root], args, env=dict(cls.server_env)).start()

    @pytest.fixture(params=["http", "grpc"])
    def contract_client(
        self, request: pytest.FixtureRequest, contract_server: ContractServer
    ) -> Iterator[ProtocolClient]:
        if request.param == "grpc" and not contract_server.grpc:
            pytest.skip(f"the server under test does not serve gRPC at {contract_server.grpc_url}")
        c = ProtocolClient(request.param, contract_server.http_url, contract_server.grpc_url)
        yield c
        c.close()

    # -- helpers -----------------------------------------------------------------------------------

    def _rows(self, srv: ContractServer, rows: int = 1) -> int | None:
        return min(rows, srv.max_batch_size) if srv.max_batch_size > 0 else None

    def check_outputs(self, srv: ContractServer, sent: dict[str, np.ndarray], got: Mapping[str, np.ndarray]) -> None:
        """Compare ``got`` with ``expected(sent)``: names, shapes, datatypes and values."""
        want = dict(srv.expected({k: v.copy() for k, v in sent.items()}))
        declared = {o["name"]: _wire(o["data_type"]) for o in srv.config.get("output", [])}
        assert set(want) <= set(got), f"outputs {sorted(want)} expected, the server returned {sorted(got)}"
        for name, expected in want.items():
            actual, expected = got[name], np.asarray(expected)
            assert actual.shape == expected.shape, f"output '{name}': shape {actual.shape}, expected {expected.shape}"
            if name in declared and declared[name] != "BYTES":
                from inferd.datatypes import numpy_dtype

                assert actual.dtype == numpy_dtype(declared[name]), (
                    f"output '{name}': dtype {actual.dtype}, the config declares {declared[name]}"
                )
            if actual.dtype.kind in "fc":
                np.testing.assert_allclose(actual, expected, rtol=self.rtol, atol=self.atol, err_msg=f"output '{name}'")
            elif actual.dtype == np.object_:
                assert [_b(x) for x in actual.ravel()] == [_b(x) for x in expected.ravel()], f"output '{name}'"
            else:
                np.testing.assert_array_equal(actual, expected, err_msg=f"output '{name}'")

    def _infer_and_check(self, srv: ContractServer, client: ProtocolClient, rows: int | None, seed: int) -> None:
        sent = make_inputs(self.inputs, rows, seed)
        types = {s.name: s.datatype for s in self.inputs}
        self.check_outputs(srv, sent, client.infer(srv.model, sent, types))

    def _expect_error(
        self,
        client: ProtocolClient,
        srv: ContractServer,
        arrays: dict[str, np.ndarray],
        types: dict[str, str],
        tensor: str,
    ) -> None:
        with pytest.raises(CallError) as info:
            client.infer(srv.model, arrays, types)
        err = info.value
        assert err.kind == "INVALID_ARG", f"expected a 400 / INVALID_ARGUMENT error, got {err}"
        assert tensor in err.message, f"the error should name input '{tensor}': {err.message}"
        assert client.server_live() and client.server_ready(), "the server should stay healthy"
        assert client.model_ready(srv.model), "the model should still be ready after a bad request"
        self._infer_and_check(srv, client, self._rows(srv), seed=7)

    # -- the contract ------------------------------------------------------------------------------

    def test_load_ready_and_metadata(self, contract_server: ContractServer, contract_client: ProtocolClient) -> None:
        srv, client = contract_server, contract_client
        assert client.server_ready()
        assert client.model_ready(srv.model), f"model '{srv.model}' is not ready\n{srv.log()}"
        meta = client.metadata(srv.model)
        assert meta["name"] == srv.model
        batch = [-1] if srv.max_batch_size > 0 else []
        for key, config_key in (("inputs", "input"), ("outputs", "output")):
            want = [
                (t["name"], _wire(t["data_type"]), batch + [int(d) for d in t.get("dims", [])])
                for t in srv.config.get(config_key, [])
            ]
            got = [(t["name"], t["datatype"], t["shape"]) for t in meta.get(key, [])]
            assert got == want, f"metadata {key} {got} do not match the config's {want}"
        declared = {t["name"]: t["datatype"] for t in meta["inputs"]}
        for spec in self.inputs:
            assert spec.name in declared, f"InputSpec '{spec.name}' is not an input of '{srv.model}': {list(declared)}"
            assert declared[spec.name] == spec.datatype, (
                f"InputSpec '{spec.name}' says {spec.datatype}, model says {declared[spec.name]}"
            )

    def test_infer(self, contract_server: ContractServer, contract_client: ProtocolClient) -> None:
        self._infer_and_check(contract_server, contract_client, self._rows(contract_server), seed=1)

    def test_batch_of_rows(self, contract_server: ContractServer, contract_client: ProtocolClient) -> None:
        srv, client = contract_server, contract_client
        if srv.max_batch_size <= 1:
            pytest.skip(f"model '{srv.model}' does not batch (max_batch_size {srv.max_batch_size})")
        self._infer_and_check(srv, client, self._rows(srv, 4), seed=2)

    def test_concurrent_requests(self, contract_server: ContractServer, contract_client: ProtocolClient) -> None:
        srv, client = contract_server, contract_client
        sent = [
            make_inputs(self.inputs, self._rows(srv, 1 + i % 3), seed=100 + i) for i in range(self.concurrent_requests)
        ]
        results = client.infer_concurrently(srv.model, sent)
        for inputs, result in zip(sent, results, strict=True):
            assert isinstance(result, dict), f"a concurrent request failed: {result}"
            self.check_outputs(srv, inputs, result)

    def test_reload(self, contract_server: ContractServer, contract_client: ProtocolClient) -> None:
        srv, client = contract_server, contract_client
        model_dir = srv.repository / srv.model
        config = model_dir / "config.pbtxt"
        if config.is_file():
            config.write_text(config.read_text() + "\n# modified by the inferd backend contract\n")
        later = time.time() + 2
        for path in [model_dir, *model_dir.rglob("*")]:
            os.utime(path, (later, later))
        client.load(srv.model)
        assert client.model_ready(srv.model)
        self._infer_and_check(srv, client, self._rows(srv, 2), seed=3)

    def test_unload(self, contract_server: ContractServer, contract_client: ProtocolClient) -> None:
        srv, client = contract_server, contract_client
        client.unload(srv.model)
        try:
            assert not client.model_ready(srv.model)
            with pytest.raises(CallError) as info:
                client.infer(srv.model, make_inputs(self.inputs, self._rows(srv), 4))
            assert info.value.kind == "NOT_FOUND", f"inference on an unloaded model: {info.value}"
            states = {e.get("state") for e in client.repository_index() if e.get("name") == srv.model}
            assert states == {"UNAVAILABLE"}, f"repository index states after unload: {states}"
            assert client.server_live()
        finally:
            client.load(srv.model)
        self._infer_and_check(srv, client, self._rows(srv), seed=5)

    def test_bad_input_datatype(self, contract_server: ContractServer, contract_client: ProtocolClient) -> None:
        srv, client = contract_server, contract_client
        spec = self.inputs[0]
        arrays = make_inputs(self.inputs, self._rows(srv), 6)
        wrong = "INT32" if spec.datatype != "INT32" else "FP32"
        arrays[spec.name] = np.zeros(arrays[spec.name].shape, dtype=np.int32 if wrong == "INT32" else np.float32)
        types = {s.name: s.datatype for s in self.inputs} | {spec.name: wrong}
        self._expect_error(client, srv, arrays, types, spec.name)

    def test_bad_input_shape(self, contract_server: ContractServer, contract_client: ProtocolClient) -> None:
        srv, client = contract_server, contract_client
        spec = self.inputs[0]
        arrays = make_inputs(self.inputs, self._rows(srv), 6)
        arrays[spec.name] = np.repeat(arrays[spec.name][..., np.newaxis], 2, axis=-1)
        self._expect_error(client, srv, arrays, {s.name: s.datatype for s in self.inputs}, spec.name)

    def test_missing_input(self, contract_server: ContractServer, contract_client: ProtocolClient) -> None:
        srv, client = contract_server, contract_client
        required = [s for s in self.inputs if not s.optional]
        if not required:
            pytest.skip("every input is optional")
        arrays = make_inputs(self.inputs, self._rows(srv), 6)
        del arrays[required[0].name]
        self._expect_error(client, srv, arrays, {s.name: s.datatype for s in self.inputs}, required[0].name)


def _b(item: Any) -> bytes:
    return item.encode() if isinstance(item, str) else bytes(item)


def _log(server: ServerProcess | InProcessServer) -> str:
    log = getattr(server, "log", None)
    return log()[-6000:] if callable(log) else ""
