"""The pages run as a new user runs them, one after another, pasting what they show: the README's
tour leaves a repository getting-started can copy over, a second copy does not nest, a nested copy
is named as such, a pasted request body is a request, the sample start-up output is today's, and
the pages that call a bare ``inferd`` say where it comes from."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from inferd.testing import free_ports
from tests.docs.walk import FENCE, ROOT, Walk, blocks, commands

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "plugins").glob("*/README.md")])
BARE = re.compile(r"^(?:[A-Z_]+=\S+ )*inferd \w")
INFERD = [sys.executable, "-c", "import sys; from inferd.host.cli import console_main; sys.exit(console_main())"]


def prose(text: str) -> str:
    """The page without its fenced blocks."""
    return FENCE.sub("", text)


def test_the_readme_tour_leaves_a_repository_getting_started_copies_afresh(tmp_path: Path) -> None:
    walk = Walk(tmp_path)
    walk.run(ROOT / "README.md")
    # getting-started's poll section starts from a copy of examples/models, in the same /tmp/
    (poll,) = [b for b in blocks(ROOT / "docs" / "getting-started.md") if "--model-control-mode=poll" in b.text]
    for command in commands(poll.text):
        if "inferd serve" not in command:
            walk.check(walk.sub(command), None, "getting-started.md", 60)
    models = tmp_path / "models"
    assert sorted(p.name for p in models.iterdir()) == ["add_sub", "string_identity"]
    done = subprocess.run([*INFERD, "check", str(models)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_nested_repository_copy_is_named_with_the_way_out(tmp_path: Path) -> None:
    models = tmp_path / "models"
    for _ in range(2):  # `cp -r examples/models /tmp/models`, twice
        subprocess.run(["cp", "-r", str(ROOT / "examples" / "models"), str(models)], check=True)
    done = subprocess.run([*INFERD, "check", str(models)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("models ")]
    assert "'models' holds models of its own (add_sub, string_identity)" in row
    assert "rm -rf DIR && cp -r SRC DIR" in row and "--exit-on-error=false" in row


def test_pages_calling_a_bare_inferd_say_to_activate_the_venv_first() -> None:
    missing = []
    for page in PAGES:
        text = page.read_text()
        first = next((b for b in blocks(page) if any(BARE.match(c) for c in shell_lines_of(b.text))), None)
        if first is None:
            continue
        before = prose("\n".join(text.splitlines()[: first.line - 1]))
        if ". .venv/bin/activate" not in before or ".venv/bin/inferd" not in before:
            missing.append(page.relative_to(ROOT).as_posix())
    assert not missing, f"call a bare `inferd` before saying to activate .venv or use .venv/bin/inferd: {missing}"


def shell_lines_of(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def test_pages_editing_a_polled_repository_say_changes_land_later() -> None:
    for page in PAGES:
        found = blocks(page)
        serves = [i for i, b in enumerate(found) if re.search(r"inferd serve .*--model-control-mode=poll", b.text)]
        if serves and any("repository/index" in b.text for b in found[serves[0] + 1 :]):
            assert "not at once" in prose(page.read_text()), page.name


def test_request_bodies_in_the_pages_are_json_that_can_be_pasted() -> None:
    bad = []
    for page in PAGES:
        for block in blocks(page):
            if block.lang not in ("bash", "sh"):
                continue
            for command in commands(block.text):
                body = re.search(r"curl .*?-d '(\{.*?\})'", command, re.S)
                if body is None:
                    continue
                try:
                    json.loads(body.group(1))
                except ValueError:
                    bad.append(f"{page.name}:{block.line}: {body.group(1)[:60]}")
    assert not bad


#: Start-up lines that depend on the machine's cores, left out of the comparison.
MACHINE = re.compile(r"worker N of N|all N workers ready|^ {2}workers \.")


def normalised(line: str) -> str:
    """A log line without its time, pid and source line, and every number as N."""
    line = re.sub(r"^([IWE])\d{4} [\d:.]+ +\d+ ([\w.]+):\d+\]", r"\1 \2]", line.rstrip())
    return re.sub(r"\d+", "N", line)


def test_the_sample_start_up_and_shutdown_output_is_todays(tmp_path: Path) -> None:
    samples = [b.text for b in blocks(ROOT / "docs" / "getting-started.md") if b.lang == "" and "] " in b.text]
    start, stop = samples[0], samples[1]
    assert "inferd ready in" in start and "inferd stopped in" in stop
    for name in ("add_sub", "string_identity"):  # the committed models (make serve adds mlp_onnx)
        shutil.copytree(ROOT / "examples" / "models" / name, tmp_path / "models" / name)
    http, grpc, metrics = free_ports(3)
    out = tmp_path / "server.log"
    with open(out, "wb") as log:
        server = subprocess.Popen([*INFERD, "serve", "--model-repository", str(tmp_path / "models"),
                                   "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
                                  stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "] serving:" not in out.read_text():
            assert server.poll() is None, out.read_text()
            time.sleep(0.1)
        time.sleep(1)  # the other workers' lines
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)
    real = out.read_text().splitlines()
    pid = next(line.split()[2] for line in real if "] serving:" in line)
    sample = [normalised(line) for line in (start + stop).splitlines() if not MACHINE.search(normalised(line))]
    ours = [normalised(line) for line in real if line.split()[2:3] == [pid] or line.startswith("  ")]
    ours = [line for line in ours if not MACHINE.search(line)]
    assert [line for line in sample if line not in ours] == [], "sample lines inferd no longer prints"
    assert [line for line in ours if line not in sample] == [], "lines inferd prints that the sample lacks"
