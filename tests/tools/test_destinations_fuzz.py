"""Whatever a model emits, the destination and argument checks answer (a verdict, never an
exception), and a value they pass has the properties the rules promise."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy.decision import ArgConstraint, Decision, ToolRules
from gateway.tools.call_check import check_call
from gateway.tools.destinations import check_destination

RULE = ArgConstraint(allowed_hosts=("*.example.com", "*"), allowed_path_prefixes=("/v1",))
DECISION = Decision(allow=True, tools=ToolRules(frozenset({"fetch"})), tool_args={"fetch": {"url": RULE}})
_PIECES = st.sampled_from(
    [
        "https://",
        "http://",
        "HTTPS://",
        "docs.example.com",
        "evil.com",
        "127.0.0.1",
        "[::1]",
        "0x7f.1",
        ":",
        ":0",
        ":443",
        ":65536",
        "@",
        "/",
        "/v1",
        "/./",
        "/../",
        "%2e",
        "%252e",
        "%2f",
        "..",
        ".",
        ";",
        "?",
        "#",
        "\\",
        " ",
        "\t",
        "\u200b",
        "ß",
        "\uff45",
        "\u2025",
        "%c0%ae",
        "xn--",
        "[",
        "]",
        "%",
        "%25",
        "localhost",
        "0",
        "1",
    ]
)
URLISH = st.lists(_PIECES, max_size=12).map("".join)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(URLISH, st.text(max_size=60)))
def test_a_destination_check_always_answers(value: str) -> None:
    result = check_destination(value, RULE)
    assert result is None or isinstance(result, str)
    if result is None and "://" in value:
        parts = urlsplit(value)
        assert parts.scheme == "https"
        assert "@" not in parts.netloc
        assert ".." not in parts.path.split("/")
        assert parts.port is None or 0 < parts.port < 65536


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=80), URLISH.map(lambda url: json.dumps({"url": url}))))
def test_a_call_check_always_answers(arguments: str) -> None:
    result = check_call(DECISION, "fetch", arguments)
    assert result is None or isinstance(result, str)
