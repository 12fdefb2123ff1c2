"""A model version that takes longer than a few seconds to load is not silence: a line every
``EVERY_S`` seconds says what is loading and for how long; a quick load logs none."""

from __future__ import annotations

import re
from pathlib import Path

from inferd.lifecycle.progress import EVERY_S
from inferd.testing import ServerProcess, write_repository
from tests.e2e import models

SLOW_INIT = f"""
import time

{models.add_sub_py(0)}

    def initialize(self, args):
        time.sleep({EVERY_S * 2 + 1})
"""


def test_a_slow_load_logs_its_progress_and_a_quick_one_does_not(tmp_path: Path) -> None:
    repo = write_repository(
        tmp_path / "models",
        {"slow": {"config.pbtxt": models.ADD_SUB_CONFIG, "1/model.py": SLOW_INIT}, "add_sub": models.add_sub()},
    )
    with ServerProcess([repo], ["--workers", "1"]) as srv:
        log = srv.log()
    seconds = [int(s) for s in re.findall(r"progress\.py:\d+\] loading: slow:1 … (\d+) s", log)]
    # a line every EVERY_S s while it loads: two at least (the load sleeps 2 x EVERY_S + 1 s), more on a
    # machine slow enough to take longer over the rest of the load
    assert len(seconds) >= 2 and EVERY_S - 1 <= seconds[0] <= EVERY_S + 2, log
    assert all(EVERY_S - 1 <= b - a <= EVERY_S + 2 for a, b in zip(seconds, seconds[1:], strict=False)), log
    assert "loading: add_sub:1 …" not in log
    assert log.index("… ") < log.index("successfully loaded 'slow' version 1")
