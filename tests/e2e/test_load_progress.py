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
    assert len(seconds) == 2 and EVERY_S - 1 <= seconds[0] < seconds[1] <= EVERY_S * 2 + 1, log
    assert "loading: add_sub:1 …" not in log
    assert log.index("… ") < log.index("successfully loaded 'slow' version 1")
