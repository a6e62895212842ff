"""The request side: which tools a request may offer, and tool outputs capped before the
upstream sees them. Stages run on an Exchange carrying a decision built directly."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequest, PermissionDenied
from gateway.policy.decision import Decision, Limits, ToolRules, ToolViolation
from gateway.tools.context_cap import ContextCap
from gateway.tools.offer import ToolOffer
from tests.tools.streams import exchange_with


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def _decision(on_violation: ToolViolation = "strip", **limits: Any) -> Decision:
    return Decision(
        allow=True, tools=ToolRules(frozenset({"search", "fetch_url"}), on_violation), limits=Limits(**limits)
    )


async def _offer(decision: Decision | None, **body: Any) -> dict[str, Any]:
    exchange = exchange_with(decision, body={"model": "m", "messages": [], **body})
    await ToolOffer()(exchange)
    return exchange.body


async def test_disallowed_tools_are_stripped() -> None:
    body = await _offer(
        _decision("strip"), tools=[_tool("search"), _tool("shell"), _tool("fetch_url")], tool_choice="auto"
    )
    assert [t["function"]["name"] for t in body["tools"]] == ["search", "fetch_url"]
    assert body["tool_choice"] == "auto"


async def test_stripping_every_tool_removes_the_tool_fields() -> None:
    body = await _offer(
        _decision("strip"), tools=[_tool("shell")], tool_choice="required", parallel_tool_calls=True
    )
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(body)


async def test_disallowed_tools_are_rejected_by_name() -> None:
    with pytest.raises(PermissionDenied) as caught:
        await _offer(
            _decision("reject"), tools=[_tool("search"), _tool("shell"), _tool("rm"), _tool("shell")]
        )
    error = caught.value
    assert error.status == 403
    assert error.code == "tool_not_allowed"
    assert error.param == "tools"
    assert error.message == "Tools not allowed by policy: 'shell', 'rm'."


@pytest.mark.parametrize("mode", ["strip", "reject"])
@pytest.mark.parametrize(
    "choice",
    [
        {"type": "function", "function": {"name": "shell"}},
        {
            "type": "allowed_tools",
            "allowed_tools": {"mode": "auto", "tools": [_tool("search"), _tool("shell")]},
        },
    ],
)
async def test_a_tool_choice_naming_a_disallowed_tool_is_rejected(mode: ToolViolation, choice: Any) -> None:
    with pytest.raises(PermissionDenied) as caught:
        await _offer(_decision(mode), tools=[_tool("search"), _tool("shell")], tool_choice=choice)
    assert caught.value.param == "tool_choice"
    assert "'shell'" in caught.value.message


async def test_allowed_offers_pass_unchanged() -> None:
    tools = [_tool("search")]
    choice = {"type": "function", "function": {"name": "search"}}
    body = await _offer(_decision("reject"), tools=tools, tool_choice=choice)
    assert body["tools"] == tools
    assert body["tool_choice"] == choice


async def test_non_function_tools_are_named_by_their_type() -> None:
    with pytest.raises(PermissionDenied) as caught:
        await _offer(
            _decision("reject"), tools=[{"type": "web_search"}, {"type": "custom", "custom": {"name": "x"}}]
        )
    assert caught.value.message == "Tools not allowed by policy: 'web_search', 'x'."


@pytest.mark.parametrize("field", ["functions", "function_call"])
async def test_legacy_function_fields_are_refused(field: str) -> None:
    value: Any = [{"name": "search"}] if field == "functions" else {"name": "search"}
    with pytest.raises(InvalidRequest) as caught:
        await _offer(_decision(), **{field: value})
    assert caught.value.param == field


async def test_without_a_decision_nothing_is_touched() -> None:
    body = await _offer(None, tools=[_tool("shell")], functions=[{"name": "x"}])
    assert body["tools"] == [_tool("shell")]


async def _cap(decision: Decision | None, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    exchange = exchange_with(decision, body={"model": "m", "messages": messages})
    await ContextCap()(exchange)
    result: list[dict[str, Any]] = exchange.body["messages"]
    return result


async def test_long_tool_outputs_are_truncated_with_a_marker() -> None:
    messages = [
        {"role": "user", "content": "u" * 50},
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 50},
        {"role": "tool", "tool_call_id": "c2", "content": "y" * 10},
    ]
    capped = await _cap(_decision(tool_output_max_chars=10), messages)
    assert capped[0]["content"] == "u" * 50  # only tool outputs are capped
    assert capped[1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "x" * 10 + "\n[tollgate: tool output truncated from 50 to 10 characters]",
    }
    assert capped[2]["content"] == "y" * 10


async def test_tool_outputs_as_content_parts_are_capped_in_total() -> None:
    parts = [
        {"type": "text", "text": "a" * 6},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "b" * 6},
        {"type": "text", "text": "c"},
    ]
    [message] = await _cap(
        _decision(tool_output_max_chars=8), [{"role": "tool", "tool_call_id": "c", "content": parts}]
    )
    assert message["content"] == [
        {"type": "text", "text": "aaaaaa"},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "bb"},
        {"type": "text", "text": "\n[tollgate: tool output truncated from 13 to 8 characters]"},
    ]


async def test_no_limit_or_no_decision_leaves_tool_outputs_alone() -> None:
    messages = [{"role": "tool", "tool_call_id": "c", "content": "x" * 100}]
    assert (await _cap(_decision(), messages))[0]["content"] == "x" * 100
    assert (await _cap(None, messages))[0]["content"] == "x" * 100
