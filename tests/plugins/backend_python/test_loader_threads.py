"""Loading Python models on several threads at once (--model-load-thread-count): a model's import
or unload never trips over another thread's imports changing ``sys.modules``."""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path

try:
    import coverage
except ImportError:  # only `make test` traces
    coverage = None  # type: ignore[assignment]

from inferd_backend_python.loader import forget_package, import_model_file

MODEL = """
class TritonPythonModel:
    def execute(self, requests):
        return []
"""


def test_forgetting_a_model_while_another_thread_imports(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.py").write_text(MODEL)
    errors: list[BaseException] = []
    stop = threading.Event()

    def load_and_forget() -> None:
        try:
            while not stop.is_set():
                module = import_model_file("m", 1, tmp_path / "1" / "model.py", tmp_path)
                forget_package(module.__name__.rpartition(".")[0])
        except BaseException as exc:
            errors.append(exc)

    def imports() -> None:  # what another model's load does: modules come and go
        names = [f"_inferd_test_churn_{i}" for i in range(50)]
        while not stop.is_set():
            for name in names:
                sys.modules[name] = types.ModuleType(name)
            for name in names:
                sys.modules.pop(name, None)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, as a loaded server does
    # The race tested is the loader's with other imports; under `make test`'s coverage, the
    # tracer's own bookkeeping of new files reads sys.modules too and trips over the churn.
    tracer = coverage.Coverage.current() if coverage is not None else None
    if tracer is not None:
        tracer.stop()
    threads = [threading.Thread(target=load_and_forget), threading.Thread(target=imports)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 3
        while not errors and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join()
        sys.setswitchinterval(interval)
        if tracer is not None:
            tracer.start()
    assert not errors, repr(errors[0])
