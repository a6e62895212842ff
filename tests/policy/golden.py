"""Golden cases of the engine contract: an input document and the exact decision the shipped
policy (policies/) must give for it, from every engine."""

from __future__ import annotations

from typing import Any

from gateway.policy.input import webhook_input

DEMO_TOOLS = {"allowed": ["fetch_url", "get_weather", "search"], "on_violation": "strip"}
DEMO_TOOL_ARGS = {
    "fetch_url": {
        "url": {
            "allowed_hosts": ["*.wikipedia.org", "docs.python.org"],
            "allowed_schemes": ["https"],
            "required": True,
        }
    }
}
DEMO_REDACT = {"request": "mask", "response": "off", "entities": ["EMAIL", "CREDIT_CARD", "API_KEY"]}
LIMITS = {"max_tokens": 4096, "tool_output_max_chars": 16000}
# Routed to the economy alias: the upstreams the tenant (demo) permits, whichever alias serves.
ECONOMY_ROUTE = {
    "alias": "economy",
    "model_class": "economy",
    "upstreams": ["gpu-pool", "local", "workers-ai"],
}
NO_REDACT = {"request": "off", "response": "off", "entities": []}
DESTINATIONS = {
    "image_url": {"allowed_hosts": ["*"], "allowed_schemes": ["https"]},
    "webhook_url": {"allowed_hosts": ["*"], "allowed_schemes": ["https"]},
}


def input_doc(**overrides: Any) -> dict[str, Any]:
    """An input document as the gateway builds it (gateway/policy/input.py), for tenant demo."""
    doc: dict[str, Any] = {
        "tenant": "demo",
        "key": {"id": "k-0123456789ab", "label": "ci"},
        "endpoint": "chat.completions",
        "model": "kimi-k2.6",
        "upstreams": ["local"],
        "tools": [],
        "tool_choice": None,
        "tool_choice_name": None,
        "stream": False,
        "response_format": None,
        "has_images": False,
        "message_roles": ["user"],
        "messages": "1",
        "prompt_tokens": "<1k",
        "session": False,
        "session_state": {"turns": "0", "tokens": "0", "spend": "0", "growth": "0"},
        "budget": "ok",
        "data_class": None,
        "workflow": "default",
        "priority": "normal",
        "async": False,
        "capacity": "ok",
        "request_id": "req-golden",
    }
    doc.update(overrides)
    return doc


def allowed(**overrides: Any) -> dict[str, Any]:
    decision: dict[str, Any] = {
        "allow": True,
        "reasons": [],
        "tools": DEMO_TOOLS,
        "tool_args": DEMO_TOOL_ARGS,
        "destinations": DESTINATIONS,
        "redact": DEMO_REDACT,
        "route": {"upstreams": ["local"]},
        "limits": LIMITS,
        "session": {},
        "defer": False,
    }
    decision.update(overrides)
    return decision


GOLDEN: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("plain chat is allowed", input_doc(), allowed()),
    (
        "listed tools, streamed, with a session",
        input_doc(tools=["fetch_url", "search"], tool_choice="auto", stream=True, session=True),
        allowed(),
    ),
    (
        "embeddings",
        input_doc(endpoint="embeddings", model="embeddings", message_roles=[], messages="0"),
        allowed(),
    ),
    (
        "an unknown tenant",
        input_doc(tenant="mallory"),
        {
            "allow": False,
            "reasons": ["tenant mallory is not known to the policy"],
            "tools": {"allowed": [], "on_violation": "reject"},
            "tool_args": {},
            "destinations": DESTINATIONS,
            "redact": NO_REDACT,
            "route": {"upstreams": ["local"]},
            "limits": LIMITS,
            "session": {},
            "defer": False,
        },
    ),
    (
        "a model not listed",
        input_doc(model="gpt-9"),
        allowed(allow=False, reasons=["model gpt-9 is not allowed for tenant demo"]),
    ),
    (
        "a named tool_choice not allowed: left to the gateway's tool guard",
        input_doc(tools=["shell"], tool_choice="named", tool_choice_name="shell"),
        allowed(),
    ),
    (
        "confidential data keeps to the local upstream",
        input_doc(upstreams=["workers-ai", "local", "gpu-pool"], data_class="confidential"),
        allowed(),
    ),
    (
        "internal data may go to two of three upstreams, sorted",
        input_doc(upstreams=["workers-ai", "local", "gpu-pool"], data_class="internal"),
        allowed(route={"upstreams": ["gpu-pool", "local"]}),
    ),
    (
        "no upstream may receive confidential data",
        input_doc(upstreams=["workers-ai"], data_class="confidential"),
        allowed(
            allow=False,
            reasons=["no upstream serving model kimi-k2.6 may receive this tenant's data"],
            route={"upstreams": []},
        ),
    ),
    (
        "several reasons, sorted",
        input_doc(model="gpt-9", budget="exceeded", data_class="secret"),
        allowed(
            allow=False,
            reasons=[
                "model gpt-9 is not allowed for tenant demo",
                "unknown data class secret",
            ],
            route={"upstreams": []},
        ),
    ),
    (
        "a soft-exceeded budget: lower max_tokens, and normal work goes to the economy class",
        input_doc(budget="soft_exceeded"),
        allowed(limits={**LIMITS, "max_tokens": 1024}, route=ECONOMY_ROUTE),
    ),
    (
        "a soft-exceeded budget leaves critical work on its model",
        input_doc(budget="soft_exceeded", priority="critical"),
        allowed(limits={**LIMITS, "max_tokens": 1024}),
    ),
    (
        "a long session is told to summarize",
        input_doc(
            session=True, session_state={"turns": "64+", "tokens": "1M+", "spend": "$10+", "growth": "10k+"}
        ),
        allowed(session={"checkpoint": {"mode": "advise", "every_turns": 16}}),
    ),
    (
        "the extraction workflow is served by the economy class",
        input_doc(workflow="extraction"),
        allowed(route=ECONOMY_ROUTE),
    ),
    (
        "a workflow the table does not list stays on its model",
        input_doc(workflow="other", priority="background"),
        allowed(),
    ),
    (
        "background work is deferred while an upstream throttles",
        input_doc(priority="background", capacity="throttled"),
        allowed(defer=True),
    ),
    (
        "an async job is told to defer alike (the gateway stores it as the job it is)",
        input_doc(priority="background", capacity="throttled", **{"async": True}),
        allowed(defer=True),
    ),
    (
        "background work is deferred (and downgraded) once a soft budget is used up",
        input_doc(priority="background", budget="soft_exceeded"),
        allowed(limits={**LIMITS, "max_tokens": 1024}, route=ECONOMY_ROUTE, defer=True),
    ),
    (
        "normal work is not deferred while an upstream throttles",
        input_doc(capacity="throttled"),
        allowed(),
    ),
    (
        "a webhook destination decision names no model and gets the tenant's webhook_url rule",
        webhook_input("demo", ("k-0123456789ab", "ci"), "req-golden").document,
        allowed(route={"upstreams": []}),
    ),
    (
        "a webhook delivery's decision has no key",
        webhook_input("demo", None, "whk_job_1_wh_1").document,
        allowed(route={"upstreams": []}),
    ),
    (
        "an unknown tenant's webhooks are denied",
        webhook_input("nobody", None, "whk_job_1_wh_1").document,
        {
            "allow": False,
            "reasons": ["tenant nobody is not known to the policy"],
            "tools": {"allowed": [], "on_violation": "reject"},
            "tool_args": {},
            "destinations": DESTINATIONS,
            "redact": NO_REDACT,
            "route": {"upstreams": []},
            "limits": LIMITS,
            "session": {},
            "defer": False,
        },
    ),
]
