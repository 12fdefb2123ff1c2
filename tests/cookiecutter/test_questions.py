"""``cookiecutter`` without ``--no-input`` asks only what cannot be derived: the backend's name,
a description and the author; the names made from the backend's name are not asked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[2] / "cookiecutter"


def test_only_the_four_questions_that_are_not_derived_are_asked(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "cookiecutter", "-o", str(tmp_path), str(TEMPLATE)],
                          input="my-model\n\n\n\n", capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.findall(r"\[\d+/(\d+)\] (\w+)", done.stdout) == [
        ("4", "backend_name"), ("4", "description"), ("4", "author"), ("4", "author_email"),
    ]  # fmt: skip
    package = tmp_path / "inferd-backend-my-model" / "src" / "inferd_backend_my_model"
    assert "class MyModelBackend(Backend)" in (package / "backend.py").read_text()
