"""How the header forwarding flags read their pattern (Triton's reading), and what they refuse at
start-up; what reaches a model is end to end in tests/e2e/test_header_forwarding.py."""

from __future__ import annotations

import pytest

from inferd.contracts.errors import InvalidArgument
from inferd.frontends.header_forward import HeaderForward
from inferd.host.plugins import PluginHost
from inferd.host.serve_command import build_parser, options_from_args


def _forwarded(pattern: str, names: list[str]) -> dict[str, str]:
    parameters: dict[str, str] = {}
    HeaderForward(pattern, withheld=("authorization",)).add_text(parameters, [(name, "v") for name in names])
    return parameters


@pytest.mark.parametrize(
    ("pattern", "names", "forwarded"),
    [
        (
            "MY_HEADER.*",
            ["my_header_1", "x-my_header", "header_1"],
            ["my_header_1", "x-my_header"],
        ),  # searched, any case
        ("(?-i)MY_HEADER.*", ["my_header_1"], []),  # Triton's case-sensitive prefix
        ("^my_header$", ["my_header", "my_header_2"], ["my_header"]),
        ("", ["a", "authorization", "key-bin", "grpc-timeout"], ["a"]),  # empty: all (Triton's "(?i)"), but these
    ],
)
def test_patterns_match_as_tritons_partial_match(pattern, names, forwarded):
    assert list(_forwarded(pattern, names)) == forwarded


def test_a_reserved_name_that_matches_is_refused_one_that_does_not_is_ignored():
    with pytest.raises(
        InvalidArgument, match=r"^Header 'triton_x' is reserved for Triton usage and cannot be forwarded\.$"
    ):
        _forwarded("triton", ["triton_x"])
    assert _forwarded("my_", ["priority", "my_x"]) == {"my_x": "v"}


def test_flags_reach_the_frontends_and_a_bad_pattern_stops_the_start(capsys):
    parser = build_parser(PluginHost())
    args = parser.parse_args(["serve", "--model-repository", "/m", "--http-header-forward-pattern", "my_.*",
                              "--grpc-header-forward-pattern=(?-i)X"])  # fmt: skip
    extra = options_from_args(args).extra
    assert (extra["http_header_forward_pattern"], extra["grpc_header_forward_pattern"]) == ("my_.*", "(?-i)X")
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["serve", "--model-repository", "/m", "--grpc-header-forward-pattern", "my_(header"])
    assert exit_.value.code == 2
    assert "--grpc-header-forward-pattern: 'my_(header' is not a regular expression" in capsys.readouterr().err
