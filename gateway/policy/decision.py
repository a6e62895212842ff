"""The decision a policy returns, parsed strictly: anything malformed is a deny.

A policy answers with one JSON object (see docs/policies.md), for example:

    {"allow": true, "reasons": [],
     "tools": {"allowed": ["search", "fetch_url"], "on_violation": "strip"},
     "tool_args": {"fetch_url": {"url": {"allowed_hosts": ["*.example.com"]}}},
     "destinations": {"image_url": {"allowed_hosts": ["*"], "allowed_schemes": ["https"]},
                      "webhook_url": {"allowed_hosts": ["hooks.example.com"]}},
     "redact": {"request": "tokenize", "response": "mask", "entities": ["EMAIL", "API_KEY"]},
     "route": {"upstreams": ["self-hosted"], "model_class": "frontier", "alias": "kimi-k2.6"},
     "limits": {"max_tokens": 4096, "tool_output_max_chars": 16000},
     "defer": false}

`defer` (with `retry_after_s`, optional) sends a background request away while capacity is
short (gateway/policy/defer.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.sessions.rules import NO_RULES, SessionRules, parse_session_rules

ToolViolation = Literal["strip", "reject"]
RedactMode = Literal["off", "mask", "tokenize", "block"]

_TOOL_VIOLATIONS = ("strip", "reject")
_REDACT_MODES = ("off", "mask", "tokenize", "block")


class MalformedDecision(ValueError):
    """The policy's answer does not have the decision's shape; the gateway denies."""


@dataclass(frozen=True, slots=True)
class ArgConstraint:
    """Where one tool argument (named by a dotted JSON path, e.g. "url" or "target.url") may point.

    Host patterns: an exact host, or "*.example.com" for any subdomain of example.com.
    Private, loopback and link-local addresses are refused whatever the patterns say,
    except where the rule may say `allow_private` (webhook URLs only): then such an address
    passes when a pattern names it (never by "*").
    A required argument that is missing is a violation; an absent optional one passes.
    """

    allowed_hosts: tuple[str, ...] = ()
    allowed_schemes: tuple[str, ...] = ("https",)
    allowed_path_prefixes: tuple[str, ...] = ()
    required: bool = False
    allow_private: bool = False


@dataclass(frozen=True, slots=True)
class Destinations:
    """Where URLs in the request that the upstream fetches may point (data: URLs always may).

    `webhook_url`: where the tenant's completion events may be delivered (gateway/jobs/).
    Without the policy's word, any public host over https.
    """

    image_url: ArgConstraint = ArgConstraint(allowed_hosts=("*",))
    webhook_url: ArgConstraint = ArgConstraint(allowed_hosts=("*",))


@dataclass(frozen=True, slots=True)
class ToolRules:
    allowed: frozenset[str] = frozenset()
    on_violation: ToolViolation = "reject"


@dataclass(frozen=True, slots=True)
class RedactRules:
    request: RedactMode = "off"
    response: RedactMode = "off"
    entities: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RouteRules:
    upstreams: tuple[str, ...] | None = None  # None: any upstream the alias lists
    model_class: str | None = None
    alias: str | None = None  # serve the request from this alias instead of the one asked for


@dataclass(frozen=True, slots=True)
class Limits:
    max_tokens: int | None = None
    tool_output_max_chars: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    allow: bool
    reasons: tuple[str, ...] = ()
    tools: ToolRules = ToolRules()
    tool_args: Mapping[str, Mapping[str, ArgConstraint]] = field(default_factory=dict)
    destinations: Destinations = Destinations()
    redact: RedactRules = RedactRules()
    route: RouteRules = RouteRules()
    limits: Limits = Limits()
    session: SessionRules = NO_RULES
    defer: bool = False  # background requests: 429 deferred, or a job (gateway/policy/defer.py)
    retry_after_s: int | None = None  # the deferred 429's Retry-After; None: the gateway's

    @classmethod
    def deny(cls, reason: str) -> Decision:
        return cls(allow=False, reasons=(reason,))


def parse_decision(value: Any) -> Decision:
    """The Decision for a policy's raw answer; raises MalformedDecision on any deviation."""
    if not isinstance(value, dict):
        raise MalformedDecision("the decision is not an object")
    allow = value.get("allow")
    if not isinstance(allow, bool):
        raise MalformedDecision("allow must be a boolean")
    return Decision(
        allow=allow,
        # Sorted here, by code point: the engines order strings (and iterate sets) differently,
        # and the same policy must give the same message from either.
        reasons=tuple(sorted(_strings(value.get("reasons", []), "reasons"))),
        tools=_tools(value.get("tools", {})),
        tool_args=_tool_args(value.get("tool_args", {})),
        destinations=_destinations(value.get("destinations", {})),
        redact=_redact(value.get("redact", {})),
        route=_route(value.get("route", {})),
        limits=_limits(value.get("limits", {})),
        session=_session(value.get("session", {})),
        defer=_defer(value.get("defer", False)),
        retry_after_s=_retry_after(value.get("retry_after_s")),
    )


def _session(value: Any) -> SessionRules:
    try:
        return parse_session_rules(value)
    except ValueError as exc:
        raise MalformedDecision(str(exc)) from None


def _defer(value: Any) -> bool:
    if not isinstance(value, bool):
        raise MalformedDecision("defer must be a boolean")
    return value


def _retry_after(value: Any) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise MalformedDecision("retry_after_s must be a positive integer")
    return value


def _tools(value: Any) -> ToolRules:
    value = _object(value, "tools")
    on_violation = value.get("on_violation", "reject")
    if on_violation not in _TOOL_VIOLATIONS:
        raise MalformedDecision("tools.on_violation must be strip or reject")
    return ToolRules(frozenset(_strings(value.get("allowed", []), "tools.allowed")), on_violation)


def _tool_args(value: Any) -> dict[str, dict[str, ArgConstraint]]:
    result: dict[str, dict[str, ArgConstraint]] = {}
    for tool, paths in _object(value, "tool_args").items():
        per_tool: dict[str, ArgConstraint] = {}
        for path, raw_rule in _object(paths, f"tool_args.{tool}").items():
            where = f"tool_args.{tool}.{path}"
            per_tool[path] = _arg_constraint(raw_rule, where)
        result[tool] = per_tool
    return result


def _arg_constraint(value: Any, where: str, private_allowed: bool = False) -> ArgConstraint:
    rule = _object(value, where)
    required = rule.get("required", False)
    if not isinstance(required, bool):
        raise MalformedDecision(f"{where}.required must be a boolean")
    allow_private = rule.get("allow_private", False)
    if not isinstance(allow_private, bool):
        raise MalformedDecision(f"{where}.allow_private must be a boolean")
    if allow_private and not private_allowed:
        raise MalformedDecision(f"{where}.allow_private is only for destinations.webhook_url")
    return ArgConstraint(
        allowed_hosts=tuple(_strings(rule.get("allowed_hosts", []), f"{where}.allowed_hosts")),
        allowed_schemes=tuple(_strings(rule.get("allowed_schemes", ["https"]), f"{where}.allowed_schemes")),
        allowed_path_prefixes=tuple(
            _strings(rule.get("allowed_path_prefixes", []), f"{where}.allowed_path_prefixes")
        ),
        required=required,
        allow_private=allow_private,
    )


def _destinations(value: Any) -> Destinations:
    value = _object(value, "destinations")
    image_url, webhook_url = value.get("image_url"), value.get("webhook_url")
    default = Destinations()
    return Destinations(
        image_url=default.image_url
        if image_url is None
        else _arg_constraint(image_url, "destinations.image_url"),
        webhook_url=default.webhook_url
        if webhook_url is None
        else _arg_constraint(webhook_url, "destinations.webhook_url", private_allowed=True),
    )


def _redact(value: Any) -> RedactRules:
    value = _object(value, "redact")
    request, response = value.get("request", "off"), value.get("response", "off")
    if request not in _REDACT_MODES or response not in _REDACT_MODES:
        raise MalformedDecision("redact.request and redact.response must be off, mask, tokenize or block")
    return RedactRules(request, response, tuple(_strings(value.get("entities", []), "redact.entities")))


def _route(value: Any) -> RouteRules:
    value = _object(value, "route")
    upstreams = value.get("upstreams")
    model_class = value.get("model_class")
    if model_class is not None and not isinstance(model_class, str):
        raise MalformedDecision("route.model_class must be a string")
    alias = value.get("alias")
    if alias is not None and (not isinstance(alias, str) or not alias):
        raise MalformedDecision("route.alias must be a non-empty string")
    return RouteRules(
        None if upstreams is None else tuple(_strings(upstreams, "route.upstreams")),
        model_class,
        alias,
    )


def _limits(value: Any) -> Limits:
    value = _object(value, "limits")
    found: dict[str, int | None] = {}
    for name in ("max_tokens", "tool_output_max_chars"):
        number = value.get(name)
        if number is not None and (not isinstance(number, int) or isinstance(number, bool) or number < 1):
            raise MalformedDecision(f"limits.{name} must be a positive integer")
        found[name] = number
    return Limits(**found)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedDecision(f"{where} must be an object")
    return value


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list | tuple | set | frozenset) or not all(isinstance(v, str) for v in value):
        raise MalformedDecision(f"{where} must be an array of strings")
    return list(value)
