"""Label values from requests stay in small, fixed sets."""

from __future__ import annotations

from gateway.exchange import Endpoint, Exchange, Principal, Tenant
from gateway.telemetry_config import LabelsConfig
from telemetry.labels import WorkflowLabels, prompt_family, turn_bucket


def _exchange(workflow: str | None = None, label: str = "") -> Exchange:
    headers = {"x-workflow": workflow} if workflow is not None else {}
    exchange = Exchange("r", Endpoint.CHAT, 0.0, 1.0, headers, b"")
    exchange.principal = Principal(Tenant("t"), "k", label)
    return exchange


def _scrub(value: str) -> str:
    return value.replace("sk-", "[SECRET]")


def test_workflows_are_first_come_up_to_the_cap() -> None:
    labels = WorkflowLabels(LabelsConfig(max_workflows=2), _scrub)
    assert labels.of(_exchange("triage")) == "triage"
    assert labels.of(_exchange("coding")) == "coding"
    assert labels.of(_exchange("third")) == "other"
    assert labels.of(_exchange("triage")) == "triage"


def test_malformed_secret_looking_or_unlisted_workflows_are_other() -> None:
    open_labels = WorkflowLabels(LabelsConfig(), _scrub)
    assert open_labels.of(_exchange("Has Spaces")) == "other"
    assert open_labels.of(_exchange("x" * 33)) == "other"
    assert open_labels.of(_exchange("sk-abc123")) == "other"
    listed = WorkflowLabels(LabelsConfig(workflows=["triage"]), _scrub)
    assert listed.of(_exchange("triage")) == "triage"
    assert listed.of(_exchange("coding")) == "other"


def test_without_a_header_the_keys_label_then_default() -> None:
    labels = WorkflowLabels(LabelsConfig(), _scrub)
    assert labels.of(_exchange(label="ci")) == "ci"
    assert labels.of(_exchange()) == "default"


def test_prompt_families_fold_into_the_configured_buckets() -> None:
    keys = [f"{i * 7919:08x}" + "0" * 24 for i in range(500)]
    families = {prompt_family(key, 16) for key in keys}
    assert families == {f"pf{i:02d}" for i in range(16)}
    assert prompt_family(None, 16) == "none"


def test_turns_count_assistant_messages_in_doubling_buckets() -> None:
    def body(assistants: int) -> dict[str, object]:
        return {"messages": [{"role": "user"}] + [{"role": "assistant"}, {"role": "user"}] * assistants}

    assert [turn_bucket(body(n)) for n in (0, 1, 2, 3, 7, 31, 32, 500)] == [
        "1",
        "2",
        "3-4",
        "3-4",
        "5-8",
        "17-32",
        "33+",
        "33+",
    ]
    assert turn_bucket({"input": "x"}) is None
