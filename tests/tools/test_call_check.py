"""Argument paths and the verdict on one tool call."""

from __future__ import annotations

import json

import pytest

from gateway.policy.decision import ArgConstraint, Decision, MalformedDecision, ToolRules, parse_decision
from gateway.tools.arg_paths import InvalidPath, MissingArgument, ShapeMismatch, parse_path, values_at
from gateway.tools.call_check import BlockedCall, check_call

WEB = ArgConstraint(allowed_hosts=("*.example.com",))
DECISION = Decision(
    allow=True,
    tools=ToolRules(frozenset({"search", "fetch_url", "crawl"})),
    tool_args={
        "fetch_url": {"url": WEB},
        "crawl": {"seeds[*]": WEB, "proxy.host": ArgConstraint(allowed_hosts=("proxy.example.com",))},
    },
)


@pytest.mark.parametrize(
    ("path", "steps"),
    [
        ("url", ("url",)),
        ("target.url", ("target", "url")),
        ("urls[0]", ("urls", 0)),
        ("urls[*]", ("urls", "*")),
        ("hops.*.url", ("hops", "*", "url")),
        ("m[1][2].x", ("m", 1, 2, "x")),
    ],
)
def test_paths_parse(path: str, steps: tuple[object, ...]) -> None:
    assert parse_path(path) == steps


@pytest.mark.parametrize("path", ["", ".", "a..b", "a.", "a[x]", "a[", "a]b", "a[-1]"])
def test_invalid_paths_are_refused(path: str) -> None:
    with pytest.raises(InvalidPath):
        parse_path(path)


def test_values_are_found_missing_ones_are_not_and_wrong_shapes_are_errors() -> None:
    doc = {"hops": [{"url": "a"}, {"url": "b"}, {}], "target": {"url": None}, "none": None}
    assert list(values_at(doc, parse_path("hops[*].url"))) == ["a", "b"]
    assert list(values_at(doc, parse_path("hops[1].url"))) == ["b"]
    assert list(values_at(doc, parse_path("hops[9].url"))) == []
    assert list(values_at(doc, parse_path("target.url"))) == [None]  # a null is found, to be refused
    assert list(values_at(doc, parse_path("nothing.here"))) == []
    with pytest.raises(ShapeMismatch):
        list(values_at(doc, parse_path("hops.url")))
    with pytest.raises(ShapeMismatch):
        list(values_at(doc, parse_path("target[0]")))
    with pytest.raises(ShapeMismatch):
        list(values_at(doc, parse_path("none.url")))


def test_a_required_path_that_leads_nowhere_is_missing() -> None:
    doc = {"hops": [{"url": "a"}, {}], "empty": []}
    for path in ("nothing", "nothing.here", "hops[5]", "hops[*].url", "hops.*.url"):
        with pytest.raises(MissingArgument):
            list(values_at(doc, parse_path(path), required=True))
    assert list(values_at(doc, parse_path("hops[0].url"), required=True)) == ["a"]
    assert list(values_at(doc, parse_path("empty[*]"), required=True)) == []


def test_allowed_tools_without_constraints_pass_whatever_their_arguments() -> None:
    assert check_call(DECISION, "search", "not even json") is None


def test_a_tool_not_allowed_is_refused() -> None:
    assert check_call(DECISION, "delete_everything", "{}") == "the tool is not allowed"
    assert check_call(DECISION, "", "{}") == "the tool call has no name"


@pytest.mark.parametrize(
    ("arguments", "verdict"),
    [
        ({"url": "https://docs.example.com/a"}, None),
        ({"other": 1}, None),  # the constrained argument is absent: nothing to check
        ({"url": "https://evil.com/"}, "argument 'url': host 'evil.com' is not allowed"),
        ({"url": "http://169.254.169.254/"}, "argument 'url': scheme 'http' is not allowed"),
        ({"url": ["https://docs.example.com/"]}, "argument 'url' is not a string but an array"),
        ({"url": ["https://docs.example.com/", "https://evil.com/"]}, "argument 'url' is not a string"),
        ({"url": 42}, "argument 'url' is not a string but a number"),
        ({"url": True}, "argument 'url' is not a string but a boolean"),
        ({"url": None}, "argument 'url' is not a string but null"),
        ({"url": {"href": "https://evil.com"}}, "argument 'url' is not a string but an object"),
    ],
)
def test_constrained_arguments(arguments: dict[str, object], verdict: str | None) -> None:
    result = check_call(DECISION, "fetch_url", json.dumps(arguments))
    if verdict is None:
        assert result is None
    else:
        assert result is not None
        assert result.startswith(verdict)


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"url": "https://docs.example.com/"', "not valid JSON"),
        ("", "not valid JSON"),
        ('["https://docs.example.com/"]', "not a JSON object"),
        ('{"url": NaN}', "not valid JSON"),
        ("[" * 100_000, "not valid JSON"),
        # Parsers disagree on which duplicate wins: the client's might read the unchecked one.
        ('{"url": "https://evil.com/", "url": "https://docs.example.com/"}', "repeat the key 'url'"),
        ('{"url": "https://docs.example.com/", "x": {"a": 1, "a": 2}}', "repeat the key 'a'"),
    ],
)
def test_unreadable_arguments_of_a_constrained_tool_are_a_violation(arguments: str, reason: str) -> None:
    result = check_call(DECISION, "fetch_url", arguments)
    assert result is not None
    assert reason in result


def test_nested_and_wildcard_paths() -> None:
    ok = {
        "seeds": ["https://a.example.com/", "https://b.example.com/"],
        "proxy": {"host": "proxy.example.com"},
    }
    assert check_call(DECISION, "crawl", json.dumps(ok)) is None
    bad_seed = {**ok, "seeds": ["https://a.example.com/", "http://127.0.0.1/"]}
    assert check_call(DECISION, "crawl", json.dumps(bad_seed)) is not None
    bad_proxy = {**ok, "proxy": {"host": "10.0.0.1"}}
    assert check_call(DECISION, "crawl", json.dumps(bad_proxy)) is not None
    wrong_shape = {**ok, "seeds": {"first": "https://a.example.com/"}, "proxy": "proxy.example.com"}
    assert (
        check_call(DECISION, "crawl", json.dumps(wrong_shape))
        == "argument 'proxy.host': arguments.proxy is not an object"
    )


def test_an_invalid_policy_path_fails_closed() -> None:
    decision = Decision(allow=True, tools=ToolRules(frozenset({"t"})), tool_args={"t": {"a..b": WEB}})
    assert check_call(decision, "t", "{}") == "the policy's argument path 'a..b' is invalid"


def test_the_note_names_the_tool_and_the_reason() -> None:
    assert BlockedCall("fetch_url", "the tool is not allowed").note() == (
        "[tollgate] tool call 'fetch_url' blocked by policy: the tool is not allowed"
    )


REQUIRED = Decision(
    allow=True,
    tools=ToolRules(frozenset({"fetch_url", "crawl"})),
    tool_args={
        "fetch_url": {"url": ArgConstraint(allowed_hosts=("*.example.com",), required=True)},
        "crawl": {"hops[*].url": ArgConstraint(allowed_hosts=("*.example.com",), required=True)},
    },
)


@pytest.mark.parametrize(
    ("tool", "arguments", "verdict"),
    [
        ("fetch_url", {"url": "https://docs.example.com/"}, None),
        ("fetch_url", {}, "required argument 'url' is missing"),
        ("fetch_url", {"URL": "https://evil.com/"}, "required argument 'url' is missing"),
        ("fetch_url", {"url": None}, "argument 'url' is not a string but null"),
        ("fetch_url", {"url": ""}, "argument 'url': is empty"),
        ("crawl", {"hops": [{"url": "https://a.example.com/"}]}, None),
        ("crawl", {"hops": []}, None),  # no hop, nothing fetched
        ("crawl", {"hops": [{"url": "https://a.example.com/"}, {"href": "x"}]}, "required argument"),
        ("crawl", {}, "required argument 'hops[*].url' is missing"),
        ("crawl", {"hops": None}, "argument 'hops[*].url': arguments.hops is not an array"),
    ],
)
def test_required_arguments(tool: str, arguments: dict[str, object], verdict: str | None) -> None:
    result = check_call(REQUIRED, tool, json.dumps(arguments))
    if verdict is None:
        assert result is None
    else:
        assert result is not None
        assert result.startswith(verdict), result


def test_the_policy_marks_arguments_required_with_a_boolean() -> None:
    rule = {"allowed_hosts": ["*.example.com"], "required": True}
    decision = parse_decision({"allow": True, "tool_args": {"fetch_url": {"url": rule}}})
    assert decision.tool_args["fetch_url"]["url"].required is True
    optional = parse_decision({"allow": True, "tool_args": {"fetch_url": {"url": {"allowed_hosts": []}}}})
    assert optional.tool_args["fetch_url"]["url"].required is False
    with pytest.raises(MalformedDecision, match="required must be a boolean"):
        parse_decision({"allow": True, "tool_args": {"fetch_url": {"url": {**rule, "required": "yes"}}}})
