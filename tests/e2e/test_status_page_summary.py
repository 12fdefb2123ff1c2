"""The start-up summary names the status page's URL, and that URL answers with the page."""

from __future__ import annotations

import re
import urllib.request

from tests.e2e import models
from tests.servers import Servers


def test_the_summary_prints_the_status_page_url_and_it_serves_the_page(serve: Servers) -> None:
    server = serve({"add_sub": models.add_sub()})
    log = server.log()
    block = log[log.index("serving:\n") :]
    match = re.search(r"\n  status page \.+ (\S+)\n", block)
    assert match, block
    url = match[1]
    assert re.fullmatch(r"http://[\d.]+:(\d+)/", url) and url.endswith(f":{server.http_port}/"), url
    # the line comes after the endpoints' and before the access rules'
    assert block.index("metrics ...") < match.start() < block.index("access ...")
    with urllib.request.urlopen(url.replace("0.0.0.0", "127.0.0.1"), timeout=30) as response:
        assert response.status == 200 and response.headers["content-type"].startswith("text/html")
        assert b"<title>inferd status</title>" in response.read()
