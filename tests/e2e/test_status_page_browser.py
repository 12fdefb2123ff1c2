"""The status page in a real headless browser (Debian's chromium and chromium-driver, driven by
selenium): it renders, and follows a model going READY -> UNAVAILABLE -> READY under poll mode as
its files change, without a reload; its screenshots show what the DOM says. On a restricted server
it opens with the group's header (sent by the browser, as an extension would) and leaves out the
figures of a group it may not read."""

from __future__ import annotations

import http.client
import io
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements-dev.txt)")
Image = pytest.importorskip("PIL.Image", reason="Pillow is not installed (matplotlib's dependency)")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium or chromedriver not found: `make test-deps` installs Debian's chromium and chromium-driver as root",
)
WIDTH, HEIGHT = 1100, 600
#: The page's badge colours (status.html's --ok and --bad), as RGB.
GREEN, RED = (0x15, 0x80, 0x3D), (0xB9, 0x1C, 0x1C)
BROKEN_PY = "raise RuntimeError('cannot import this model')\n"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(str(DRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def state_of(driver: Any, model: str, version: str) -> str | None:
    """The state the page shows for ``model`` ``version`` (None: no such row)."""
    return driver.execute_script(
        "const r = document.querySelector(`tr[data-model='${arguments[0]}'][data-version='${arguments[1]}']`);"
        "return r ? r.dataset.state : null;",
        model,
        version,
    )


def cells(driver: Any, model: str, version: str) -> list[str] | None:
    """The texts of the cells of the row of ``model`` ``version`` (None: no such row)."""
    return driver.execute_script(
        "const r = document.querySelector(`tr[data-model='${arguments[0]}'][data-version='${arguments[1]}']`);"
        "return r ? Array.from(r.cells, (c) => c.textContent) : null;",
        model,
        version,
    )


def infer(port: int, model: str) -> None:
    body = {
        "inputs": [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]} for n in ("INPUT0", "INPUT1")]
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", f"/v2/models/{model}/versions/1/infer", json.dumps(body))
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def screenshot(driver: Any) -> Any:
    """The page as PNG, decoded: checked for its size (the viewport's) and that it is no blank image."""
    image = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
    viewport = driver.execute_script("return [innerWidth * devicePixelRatio, innerHeight * devicePixelRatio];")
    assert list(image.size) == viewport and image.width == WIDTH and image.height > HEIGHT // 2, image.size
    assert len(image.getcolors(maxcolors=1 << 24)) > 50, "a blank screenshot"
    return image


def count(image: Any, rgb: tuple[int, int, int]) -> int:
    """How many pixels of ``image`` are exactly ``rgb`` (the badges are filled with their colour)."""
    return next((n for n, colour in image.getcolors(maxcolors=1 << 24) if colour == rgb), 0)


def test_the_page_follows_a_model_through_poll_mode(browser, tmp_path: Path):
    both = models.ADD_SUB_CONFIG + "version_policy: { all: {} }\n"
    repo = write_repository(
        tmp_path / "models",
        {"add_sub": models.add_sub(versions=(1, 2), config=both),
         "broken": {"config.pbtxt": models.ADD_SUB_CONFIG, "1/model.py": BROKEN_PY}},
    )  # fmt: skip
    args = ["--model-control-mode=poll", "--repository-poll-secs=1", "--exit-on-error=false"]
    with ServerProcess([repo], args).start(wait_ready=False) as server:
        browser.get(f"http://{server.http_url}/")
        assert browser.title == "inferd status"
        browser.execute_script("window.notReloaded = true;")

        wait_for(lambda: state_of(browser, "add_sub", "2") == "READY", "add_sub 2 READY")
        wait_for(lambda: state_of(browser, "broken", "1") == "UNAVAILABLE", "broken UNAVAILABLE")
        assert state_of(browser, "add_sub", "1") == "READY"
        assert "cannot import this model" in browser.find_element("id", "models").text
        assert "inferd" in browser.find_element("tag name", "header").text
        before = screenshot(browser)
        green, red = count(before, GREEN), count(before, RED)
        assert green > 200 and red > 100  # two READY badges, an UNAVAILABLE one

        def figures() -> list[str] | None:  # requests keep coming: every refresh has new ones to rate
            infer(server.http_port, "add_sub")
            shown = cells(browser, "add_sub", "1")
            return shown if shown and "–" not in shown[5:] else None

        rps, latency, queue, inferences = wait_for(figures, "the live figures")[5:]
        assert float(rps) > 0 and float(latency) > 0 and float(queue) >= 0 and int(inferences) > 0

        aside = tmp_path / "add_sub-2"
        (repo / "add_sub" / "2").rename(aside)  # the version leaves the repository: unloaded
        wait_for(lambda: state_of(browser, "add_sub", "2") == "UNAVAILABLE", "add_sub 2 UNAVAILABLE")
        row = browser.find_element("css selector", "tr[data-model='add_sub'][data-version='2']").text
        assert "UNAVAILABLE" in row and "unloaded" in row
        during = screenshot(browser)
        assert count(during, GREEN) < green and count(during, RED) > red  # a badge turned red

        aside.rename(repo / "add_sub" / "2")
        wait_for(lambda: state_of(browser, "add_sub", "2") == "READY", "add_sub 2 READY again")
        after = screenshot(browser)
        assert count(after, GREEN) > count(during, GREEN) and count(after, RED) < count(during, RED)
        assert browser.execute_script("return window.notReloaded === true;")  # refreshed in place
        assert not browser.find_element("id", "error").is_displayed()


def test_a_restricted_page_opens_with_its_header_and_hides_the_figures_it_may_not_read(browser, tmp_path: Path):
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    args = ["--http-restricted-api=model-repository:admin-key=yes", "--http-restricted-api=statistics:stats-key=yes"]
    with ServerProcess([repo], args) as server:
        browser.get(f"http://{server.http_url}/")
        assert "This API is restricted, expecting header 'admin-key'" in browser.find_element("tag name", "body").text
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"admin-key": "yes"}})
        try:
            browser.get(f"http://{server.http_url}/")
            wait_for(lambda: state_of(browser, "add_sub", "1") == "READY", "add_sub READY")
            note = browser.find_element("id", "stats-note").text
            assert note == "Live figures hidden: this request may not read the statistics API."
            assert cells(browser, "add_sub", "1")[5:] == ["–", "–", "–", "–"]
        finally:
            browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})


class NoHttpPort(ServerProcess):
    """A server whose only HTTP is the OpenAI port: live once its start-up summary is logged."""

    def wait_live(self, timeout: float = 120.0) -> None:
        wait_for(lambda: "] serving:" in self.log() and self.wait_ports(), "the start-up summary", timeout)

    def wait_ready(self, timeout: float = 120.0) -> None:
        self.wait_live(timeout)


def test_the_openai_ports_page_shows_its_errors_message_not_an_object(browser, tmp_path: Path):
    """The OpenAI port answers errors in OpenAI's shape, ``{"error": {"message": ...}}``: the page's
    banner shows that message (it once showed ``[object Object]``)."""
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    args = ["--allow-http=false", "--openai-port=0", "--http-restricted-api=model-repository:admin=s3cret"]
    with NoHttpPort([repo], args) as server:
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"admin": "s3cret"}})
        try:
            browser.get(f"http://127.0.0.1:{server.ports['openai']}/")
            wait_for(lambda: state_of(browser, "add_sub", "1") == "READY", "add_sub READY")
            assert not browser.find_element("id", "error").is_displayed()
        finally:
            browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
        banner = wait_for(lambda: browser.find_element("id", "error").text, "the error banner")  # next refresh: 403
        assert banner.startswith("Cannot read v2/status: 403: This API is restricted, expecting header 'admin'"), banner
        assert "[object Object]" not in banner
