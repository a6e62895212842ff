"""Sessions seen from outside: the decision log and the access line carry the session key
and the workflow, every decision of a session is on its record and in the log, a policy's
session limits apply, and /metrics shows the costliest sessions."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.redaction.scrub import default_scrubber
from gateway.stages.admit import scoped_session_key
from simulator import RunningSimulator
from tests.harness import captured_logs, eventually, openai_error
from tests.policy.gateway_setup import TENANTS, policy_gateway_config, write_policy_dir
from tests.servers import TEST_KEY, running_gateway
from tests.sessions.chats import chats


def card_like_session(tenant: str) -> str:
    """A session id whose hashed key has a run of digits that passes the card check: a
    scrubber that scanned the key would mask part of it."""
    for n in range(200_000):
        session = f"conv-card-{n}"
        key = scoped_session_key(tenant, session)
        if default_scrubber().record({"k": key})["k"] != key:
            return session
    raise AssertionError("no card-like key found")


@pytest.mark.parametrize("card_like", [False, True])
def test_a_sessions_decisions_are_on_its_record_and_in_the_log_with_its_key_and_workflow(
    upstream: RunningSimulator, tmp_path: Path, card_like: bool
) -> None:
    tenants = {**TENANTS, "alpha": {**TENANTS["alpha"], "session": {"max_input_tokens": 200}}}
    policy = {"dir": str(write_policy_dir(tmp_path / "policies", tenants))}
    audit = tmp_path / "audit.jsonl"
    config = policy_gateway_config(
        upstream,
        policy,
        audit={"path": str(audit), "flush_interval_ms": 0},
        state={"sqlite_path": str(tmp_path / "state.db")},
        server={"access_log": True},
        sessions={"enabled": True},
        routing={"workflows": ["triage"]},
    )
    session = card_like_session("alpha") if card_like else f"conv-{uuid.uuid4().hex}"
    key = scoped_session_key("alpha", session)
    headers = {"authorization": f"Bearer {TEST_KEY}", "x-session-id": session, "x-workflow": "triage"}
    with running_gateway(config) as gateway, captured_logs() as logs:
        ok = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "chat", "messages": [{"role": "user", "content": "hello"}]},
            headers=headers,
        )
        assert ok.status_code == 200, ok.text
        too_long = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "chat", "messages": [{"role": "user", "content": "word " * 400}]},
            headers=headers,
        )
        assert openai_error(too_long, 400)["code"] == "context_length_exceeded"  # the policy's ceiling
        assert len(chats(upstream)) == 1
        record = httpx.get(f"{gateway.url}/v1/sessions/{session}", headers=headers).json()
        page = httpx.get(f"{gateway.url}/metrics").text
    decisions = [r for r in map(json.loads, audit.read_text().splitlines()) if r["type"] == "decision"]
    assert len(decisions) == 2
    assert {(d["session_key"], d["workflow"]) for d in decisions} == {(key, "triage")}
    assert all(d["decision"]["session"] == {"max_input_tokens": 200} for d in decisions)
    assert record["turns"] == 1
    assert record["decision_ids"] == [d["decision_id"] for d in decisions]  # the refused one too
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    access = [line for line in lines if line.get("msg") == "request"]
    assert {(a["session_key"], a["workflow"]) for a in access} == {(key, "triage")}
    assert all(session not in json.dumps(line) for line in lines if line["logger"].startswith("tollgate"))
    assert session not in audit.read_text()
    assert f'tollgate_session="{key[:12]}"' in page
    assert 'tollgate_measure="tokens"' in page


def test_a_session_metric_counts_checkpoints(upstream: RunningSimulator, tmp_path: Path) -> None:
    policy = {"dir": str(write_policy_dir(tmp_path / "policies"))}
    config = policy_gateway_config(
        upstream,
        policy,
        state={"sqlite_path": str(tmp_path / "state.db")},
        sessions={"enabled": True, "checkpoints": {"mode": "advise", "every_turns": 1}},
    )
    headers = {"authorization": f"Bearer {TEST_KEY}", "x-session-id": "advised"}
    with running_gateway(config) as gateway:
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "chat", "messages": [{"role": "user", "content": "hello"}]},
            headers=headers,
        )
        assert answer.headers["x-tollgate-checkpoint"] == "due"
        assert eventually(
            lambda: (
                'tollgate_session_checkpoints_total{tollgate_outcome="advised",tollgate_tenant="alpha"} 1'
                in httpx.get(f"{gateway.url}/metrics").text
            )
        )


def test_a_summary_goes_through_the_policy_redaction_and_the_decision_log(
    upstream: RunningSimulator, tmp_path: Path
) -> None:
    redacting = {**TENANTS["alpha"], "redact": {"request": "mask", "response": "off", "entities": ["EMAIL"]}}
    policy = {"dir": str(write_policy_dir(tmp_path / "policies", {**TENANTS, "alpha": redacting}))}
    audit = tmp_path / "audit.jsonl"
    config = policy_gateway_config(
        upstream,
        policy,
        audit={"path": str(audit), "flush_interval_ms": 0},
        state={"sqlite_path": str(tmp_path / "state.db")},
        sessions={
            "enabled": True,
            "checkpoints": {"mode": "compact", "every_turns": 2, "summarizer": "chat"},
        },
        routing={"workflows": ["triage"]},
    )
    session = f"conv-{uuid.uuid4().hex}"
    headers = {"authorization": f"Bearer {TEST_KEY}", "x-session-id": session, "x-workflow": "triage"}
    history: list[dict[str, str]] = []
    with running_gateway(config) as gateway:
        for n in range(3):
            history.append({"role": "user", "content": f"turn {n}: write to jane.doe@example.com about it"})
            answer = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                json={"model": "chat", "messages": history, "max_tokens": 16},
                headers=headers,
            )
            assert answer.status_code == 200, answer.text
            history.append(answer.json()["choices"][0]["message"])

        def record() -> dict[str, Any]:
            found = httpx.get(f"{gateway.url}/v1/sessions/{session}", headers=headers)
            return found.json() if found.status_code == 200 else {}

        assert eventually(lambda: record().get("turns") == 3)
        stored = record()
    summaries = [r for r in chats(upstream) if r.body["messages"][-1]["content"].startswith("Summarize")]
    assert len(summaries) == 1
    sent = json.dumps(summaries[0].body)
    assert "jane.doe@example.com" not in sent  # the summary request was redacted like any other
    assert "[EMAIL]" in sent
    decisions = [r for r in map(json.loads, audit.read_text().splitlines()) if r["type"] == "decision"]
    key = scoped_session_key("alpha", session)
    assert len(decisions) == 3 + 1  # each turn's, and the summary's own
    assert {d["session_key"] for d in decisions} == {key}
    # The summary is spent on the session's behalf: its key and workflow, and it is no turn of it.
    assert {d["workflow"] for d in decisions} == {"triage"}
    # Every decision taken in the session is on its record, the summary's too.
    assert sorted(stored["decision_ids"]) == sorted(d["decision_id"] for d in decisions)


def test_a_policys_session_cap_without_metering_holds_against_the_record_as_stored(
    upstream: RunningSimulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No state store, budget or cap in the config (metering off; the records in the embedded
    store, in the working directory): the policy's cap is checked against the record as the
    store has it, not the worker's cached copy (`sessions.cache_s` long)."""
    monkeypatch.chdir(tmp_path)
    tenants = {**TENANTS, "alpha": {**TENANTS["alpha"], "session": {"max_tokens": 40}}}
    policy = {"dir": str(write_policy_dir(tmp_path / "policies", tenants))}
    config = policy_gateway_config(
        upstream,
        policy,
        sessions={"enabled": True, "cache_s": 60},
    )
    session = f"capped-{uuid.uuid4().hex}"
    headers = {"authorization": f"Bearer {TEST_KEY}", "x-session-id": session}
    body = {"model": "chat", "messages": [{"role": "user", "content": "hello " * 20}], "max_tokens": 16}
    with running_gateway(config) as gateway:
        first = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=headers)
        assert first.status_code == 200, first.text
        assert first.json()["usage"]["total_tokens"] >= 40

        def turns() -> object:
            found = httpx.get(f"{gateway.url}/v1/sessions/{session}", headers=headers)
            return found.json()["turns"] if found.status_code == 200 else 0

        assert eventually(lambda: turns() == 1)
        # The worker read the record (none yet) for the first turn and may reuse that for 60 s.
        assert (tmp_path / "tollgate-state.db").exists()
        second = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=headers)
        assert openai_error(second, 429)["code"] == "session_budget_exceeded"
    assert len(chats(upstream)) == 1
