"""The status page links to the plots of ``--status-plots-dir``: ``inferd perf --plot`` writes one
there, ``GET /v2/status`` lists it first (newest first), ``GET /v2/status/plots/NAME`` serves its
bytes (restricted as the page is; nothing but a plot file directly in the folder), and the page in
a headless browser shows the link to it."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.servers import Servers

ADMIN = {"admin": "s3cret"}
FAST = ["-p", "200", "-r", "3"]


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def plots_of(port: int) -> Any:
    code, _, body = get(port, "/v2/status", ADMIN)
    assert code == 200, body
    return json.loads(body)["plots"]


@pytest.fixture(scope="module")
def plots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plots")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, plots: Path) -> Iterator[ServerProcess]:
    repo = write_repository(tmp_path_factory.mktemp("repo"), {"add_sub": models.add_sub()})
    args = ["--status-plots-dir", str(plots), "--http-restricted-api=model-repository:admin=s3cret"]
    with ServerProcess([repo], args) as proc:
        yield proc


def test_perf_plot_is_listed_first_and_served(server: ServerProcess, plots: Path) -> None:
    assert plots_of(server.http_port) == []
    (plots / "notes.txt").write_text("not a plot")  # listed only: .png, .svg, .pdf
    old = plots / "older.png"
    old.write_bytes(b"\x89PNG\r\n\x1a\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    target = plots / "add_sub.svg"
    run = subprocess.run([sys.executable, "-m", "inferd.host.cli", "perf", "-m", "add_sub", "-u", server.http_url,
                          "--concurrency-range", "1:2", *FAST, "--plot", str(target)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout

    listed = plots_of(server.http_port)
    assert [p["name"] for p in listed] == ["add_sub.svg", "older.png"]
    assert listed[0]["url"] == "v2/status/plots/add_sub.svg"
    assert listed[0]["modified"] == pytest.approx(target.stat().st_mtime)
    code, headers, body = get(server.http_port, "/" + listed[0]["url"], ADMIN)
    assert code == 200 and headers["content-type"] == "image/svg+xml"
    assert body == target.read_bytes() and b"add_sub: throughput vs concurrency" in body
    assert "default-src 'none'" in headers["content-security-policy"]  # an SVG's scripts do not run here
    assert headers["x-content-type-options"] == "nosniff"
    code, headers, body = get(server.http_port, "/v2/status/plots/older.png", ADMIN)
    assert (code, headers["content-type"], body) == (200, "image/png", old.read_bytes())


def test_plots_are_restricted_as_the_page_is(server: ServerProcess) -> None:
    code, _, body = get(server.http_port, "/v2/status/plots/older.png")
    assert code == 403 and b"This API is restricted, expecting header 'admin'" in body


@pytest.mark.parametrize("name", ["notes.txt", "missing.svg", ".hidden.svg", "..%2Fsecret.svg", "outside.svg"])
def test_only_plot_files_directly_in_the_folder_are_served(server: ServerProcess, plots: Path, name: str) -> None:
    secret = plots.parent / "secret.svg"
    secret.write_text("<svg/>")
    (plots / ".hidden.svg").write_text("<svg/>")
    if not (plots / "outside.svg").exists():
        (plots / "outside.svg").symlink_to(secret)  # a link out of the folder
    code, _, body = get(server.http_port, f"/v2/status/plots/{name}", ADMIN)
    assert code == 404, body
    assert b"--status-plots-dir" in body or b"Not Found" in body


def test_without_the_flag_there_is_no_plot_list(serve: Servers) -> None:
    server = serve({"add_sub": models.add_sub()})
    code, _, body = get(server.http_port, "/v2/status")
    assert code == 200 and json.loads(body)["plots"] is None
    code, _, body = get(server.http_port, "/v2/status/plots/x.svg")
    assert code == 404 and "started without --status-plots-dir" in json.loads(body)["error"]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium or chromedriver not found: `make test-deps` installs Debian's chromium and chromium-driver as root",
)
def test_the_page_links_to_the_last_plot_in_a_browser(serve: Servers, tmp_path: Path) -> None:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements-dev.txt)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    folder = tmp_path / "plots"
    folder.mkdir()
    server = serve({"add_sub": models.add_sub()}, "--status-plots-dir", str(folder))
    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(str(DRIVER)))
    try:
        driver.get(f"http://{server.http_url}/")
        read = "const p = document.getElementById('last-plot'); return p ? p.textContent : null;"
        deadline = time.monotonic() + 30
        while "No plot yet" not in (driver.execute_script(read) or ""):
            assert time.monotonic() < deadline, driver.execute_script(read)
            time.sleep(0.2)
        (folder / "perf.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"><text>drawn</text></svg>')
        while "Last plot: perf.svg" not in (driver.execute_script(read) or ""):  # the next refresh, no reload
            assert time.monotonic() < deadline, driver.execute_script(read)
            time.sleep(0.2)
        href = driver.execute_script("return document.querySelector('#last-plot a').href;")
        assert href == f"http://{server.http_url}/v2/status/plots/perf.svg"
        driver.get(href)
        assert "drawn" in driver.page_source
    finally:
        driver.quit()
