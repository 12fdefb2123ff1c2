"""Registration: ``--openai-port``, ``--openai-address``, ``--openai-tokenizer``, ``--chat-template``,
``--tool-call-parser``, ``--default-max-tokens``, ``--allow-openai``
and the ``openai`` frontend. Imports nothing of the API until the server starts it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from inferd.api import FrontendRegister, StartupError, hookimpl, parse_bool

if TYPE_CHECKING:
    from inferd.api import Frontend, ServerSettings
    from inferd_frontend_openai.frontend import OpenAIFrontend

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major refuses it.
INFERD_API = (1, 1)

#: The port of Triton's OpenAI-compatible frontend.
DEFAULT_PORT = 9000


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("OpenAI-compatible API (inferd-frontend-openai)")
    group.add_argument(
        "--allow-openai",
        type=parse_bool,
        default=True,
        metavar="<bool>",
        help="serve the OpenAI-compatible API (default: true)",
    )
    group.add_argument(
        "--openai-port",
        type=int,
        default=None,
        metavar="<int>",
        help=f"its port (default: {DEFAULT_PORT}, opened only when a model this API serves "
        "is loaded at start-up; 0: any free port; when the default port is in use the "
        "server starts without this API and warns)",
    )
    group.add_argument(
        "--openai-address", default="", metavar="<string>", help="its address (default: the server's --http-address)"
    )
    group.add_argument(
        "--openai-tokenizer",
        default="",
        metavar="<path>",
        help="a Hugging Face tokenizer directory used for every model (default: each model's own)",
    )
    group.add_argument(
        "--chat-template",
        default="",
        metavar="<path>",
        help="a Jinja chat template file (or the template itself) for every model, as vllm serve's "
        "(default: each model's own; a vLLM model's model.json 'chat_template' wins)",
    )
    group.add_argument(
        "--tool-call-parser",
        default="",
        metavar="<string>",
        help="vLLM's tool-call parser for 'auto' tool choice (e.g. hermes), as vllm serve's "
        "(default: none; a vLLM model's model.json 'tool_call_parser' wins)",
    )
    group.add_argument(
        "--default-max-tokens",
        type=_positive,
        default=None,
        metavar="<int>",
        help="the most tokens a completion generates when the request sets neither max_tokens nor "
        "max_completion_tokens, as Triton's OpenAI frontend's flag (default: as vllm serve, the rest "
        "of a vLLM model's context, max_model_len minus the prompt's tokens; another model's own default)",
    )


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return number


def _factory(options: ServerSettings) -> OpenAIFrontend | None:
    extra = options.extra
    if not extra.get("allow_openai", True):
        return None
    from inferd_frontend_openai.frontend import OpenAIFrontend
    from inferd_frontend_openai.tokenizer import read_template

    tokenizer = Path(extra["openai_tokenizer"]) if extra.get("openai_tokenizer") else None
    if tokenizer is not None and not (tokenizer / "tokenizer.json").is_file():
        raise StartupError(f"--openai-tokenizer {tokenizer}: no tokenizer.json in that directory")
    try:
        template = read_template(extra["chat_template"]) if extra.get("chat_template") else None
    except (OSError, ValueError) as exc:
        raise StartupError(f"--chat-template: {exc}") from None
    port = extra.get("openai_port")
    host = extra.get("openai_address") or options.host
    http = options.http  # the HTTP port's certificates and body limit, as the metrics port's
    return OpenAIFrontend(
        host,
        DEFAULT_PORT if port is None else int(port),
        tokenizer,
        fallback=port is None,
        tls=http.tls,
        max_input_size=http.max_input_size,
        chat_template=template,
        tool_call_parser=extra.get("tool_call_parser") or None,
        status_page=not options.allow_http,  # the only port serving HTTP: it shows the status page
        default_max_tokens=extra.get("default_max_tokens"),
    )


@hookimpl
def inferd_register_frontends(register: FrontendRegister) -> None:
    register("openai", _factory)


class _Frontends(Protocol):
    """The running server, as :func:`inferd_startup` reads it here: its started frontends."""

    @property
    def frontends(self) -> Sequence[Frontend]: ...


@hookimpl
def inferd_startup(server: _Frontends) -> None:
    """Show the OpenAI API's LLM metrics on ``/metrics``: a metrics source (with ``--workers N``
    the answering worker sums every worker's counters and histograms); serve ``/metrics`` on the
    OpenAI port too."""
    from inferd.api import SOURCES
    from inferd_frontend_openai.frontend import OpenAIFrontend

    openai = next((f for f in server.frontends if isinstance(f, OpenAIFrontend)), None)
    if openai is not None:
        SOURCES.add(openai.metrics)
        # /metrics on this port too: the metrics frontend's scrape (found by its name and method)
        metrics = next((f for f in server.frontends if f.name == "metrics"), None)
        if openai.api is not None and metrics is not None:
            openai.api.scrape = getattr(metrics, "scrape_workers", None)
