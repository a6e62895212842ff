"""Batch input files are governed at upload: what the tenant's policy masks is stored
nowhere (the SQLite files, the Redis keys, the decision log), each line's decision is
logged, and the batch still completes with the request as redaction left it. The real
gateway with the shipped Rego policy, the real `openai` client, the job store on SQLite
and on Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import redis

from adapters.policy.opa import OpaEngine
from gateway.app import keyring_from, tenants_from
from gateway.config import PolicyConfig
from gateway.errors import InvalidRequest, PolicyUnavailable
from gateway.forward import Forwarder
from gateway.jobs.batch_input import read_lines
from gateway.jobs.input_files import InputFiles
from gateway.pipeline import Pipeline, Stage
from gateway.redaction.settings import RedactionSettings
from gateway.redaction.state import RedactionCounters
from gateway.stages.admit import Admit
from gateway.stages.decide import Decide
from gateway.stages.redact import Redact
from simulator import RunningSimulator
from tests.harness import openai_upstream
from tests.jobs.gateways import jobs_config
from tests.jobs.test_batch_api import wait_done
from tests.metering.conftest import REDIS_URL, delete_prefix
from tests.policy.conftest import SHIPPED_POLICIES
from tests.policy.gateway_setup import write_policy_dir
from tests.policy.opa_server import opa_protocol_server
from tests.redaction.corpus import GITHUB
from tests.servers import (
    OTHER_TENANT_KEY,
    TEST_KEY,
    RunningGateway,
    gateway_config,
    running_gateway,
)

EMAIL = "jane.roe.private@example.org"
SECRETS = (EMAIL.encode(), GITHUB.encode())
POLICY_TENANTS = {
    "alpha": {
        "models": ["chat", "embed"],
        "redact": {"request": "mask", "response": "off", "entities": ["EMAIL", "API_KEY"]},
    },
    "beta": {
        "models": ["chat"],
        "redact": {"request": "tokenize", "response": "off", "entities": ["EMAIL", "API_KEY"]},
    },
}


class Deployment:
    def __init__(self, gateway: RunningGateway, root: Path, store: str, prefix: str) -> None:
        self.gateway = gateway
        self.root = root
        self.store = store
        self.prefix = prefix

    def stored_bytes(self) -> bytes:
        """Everything the gateway keeps: every file under its directory (the SQLite stores with
        their WAL, the decision log), and on Redis every value under the jobs' key prefix."""
        found = [path.read_bytes() for path in self.root.rglob("*") if path.is_file()]
        if self.store == "redis":
            client = redis.Redis.from_url(REDIS_URL)
            try:
                keys = list(client.scan_iter(match=f"{self.prefix}:*", count=1000))
                assert keys
                for key in keys:
                    found.append(key)
                    found.extend(_redis_values(client, key))
            finally:
                client.close()
        return b"\n".join(found)

    def decisions(self) -> list[dict[str, Any]]:
        text = (self.root / "audit.jsonl").read_bytes()
        records = [orjson.loads(line) for line in text.splitlines() if line.strip()]
        return [r for r in records if r.get("type") == "decision"]


def _redis_values(client: redis.Redis, key: bytes) -> list[bytes]:
    kind = client.type(key).decode()
    if kind == "string":
        return [client.get(key) or b""]
    if kind == "hash":
        return [part for pair in client.hgetall(key).items() for part in pair]
    if kind == "list":
        return list(client.lrange(key, 0, -1))
    if kind == "set":
        return list(client.smembers(key))
    if kind == "zset":
        return list(client.zrange(key, 0, -1))
    if kind == "stream":
        return [part for _, fields in client.xrange(key) for pair in fields.items() for part in pair]
    raise AssertionError(f"a key of type {kind} is not scanned")


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def deployment(
    request: pytest.FixtureRequest, sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp(f"input-files-{request.param}")
    policy_dir = write_policy_dir(tmp_path_factory.mktemp("policy") / "policies", POLICY_TENANTS)
    prefix = f"tgjobs-{uuid.uuid4().hex[:12]}"
    jobs: dict[str, Any] = {"sqlite_path": str(root / "jobs.db")}
    if request.param == "redis":
        jobs = {"store": "redis", "redis_url": REDIS_URL, "key_prefix": prefix}
    config = jobs_config(
        sim,
        root,
        jobs=jobs,
        policy={"dir": str(policy_dir), "state_dir": str(tmp_path_factory.mktemp("policy-state"))},
        audit={"path": str(root / "audit.jsonl"), "fsync": "never", "flush_interval_ms": 0},
    )
    try:
        with running_gateway(config) as running:
            yield Deployment(running, root, request.param, prefix)
    finally:
        delete_prefix(prefix)


def client_for(deployment: Deployment, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=deployment.gateway.base_url, api_key=key, max_retries=0, timeout=60)


def line(custom_id: str, content: str, model: str = "chat", url: str = "/v1/chat/completions") -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 8}
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def read_jsonl(text: bytes) -> dict[str, dict[str, Any]]:
    rows = [orjson.loads(row) for row in text.splitlines() if row.strip()]
    return {row["custom_id"]: row for row in rows}


def test_an_uploaded_file_keeps_nothing_the_policy_masks_and_its_batch_completes(
    deployment: Deployment, sim: RunningSimulator
) -> None:
    marker = uuid.uuid4().hex
    lines = [
        line("mail", f"{marker} write to {EMAIL} today"),
        line("token", f"{marker} my token is {GITHUB}"),
        line("plain", f"{marker} nothing to hide"),
        line("denied", f"{marker} ask {EMAIL}", model="kimi-sync"),  # the policy does not allow it
        b'{"custom_id": "broken", "body": {"text": "' + EMAIL.encode() + b'"',  # not JSON, a secret in it
    ]
    with client_for(deployment, TEST_KEY) as client:
        uploaded = client.files.create(file=("secrets.jsonl", b"\n".join(lines) + b"\n"), purpose="batch")
        assert uploaded.bytes == len(b"\n".join(lines) + b"\n")
        stored = deployment.stored_bytes()
        assert not any(secret in stored for secret in SECRETS)
        with pytest.raises(openai.BadRequestError) as refused:
            client.files.content(uploaded.id)
        assert "Not allowed to download files of purpose: batch" in refused.value.message

        logged = {r["request_id"]: r for r in deployment.decisions()}
        assert logged[f"{uploaded.id}:1"]["allow"] is True
        assert logged[f"{uploaded.id}:1"]["input"]["async"] is True
        assert logged[f"{uploaded.id}:4"]["allow"] is False
        assert f"{uploaded.id}:5" not in logged  # not a request: nothing for the policy to decide

        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        done = wait_done(client, batch.id)
        assert done.status == "completed"
        assert (done.request_counts.completed, done.request_counts.failed) == (3, 2)
        output = read_jsonl(client.files.content(done.output_file_id).read())
        errors = read_jsonl(client.files.content(done.error_file_id).read())
    assert set(output) == {"mail", "token", "plain"}
    denied = errors["denied"]["response"]  # refused by the policy, as the sync call would be
    assert denied["status_code"] == 403 and denied["body"]["error"]["code"] == "policy_denied"
    assert errors["broken"]["error"]["code"] == "invalid_line"
    assert "not valid JSON" in errors["broken"]["error"]["message"]
    sent = [str(r.body) for r in sim.requests if marker in str(r.body)]
    assert len(sent) == 3
    assert any("[EMAIL]" in body for body in sent) and any("[GITHUB_TOKEN]" in body for body in sent)
    assert not any(secret.decode() in body for body in sent for secret in SECRETS)
    assert not any(secret in deployment.stored_bytes() for secret in SECRETS)


def test_a_tokenizing_policy_stores_placeholders_and_the_output_keeps_them(
    deployment: Deployment, sim: RunningSimulator
) -> None:
    marker = uuid.uuid4().hex
    with client_for(deployment, OTHER_TENANT_KEY) as client:
        uploaded = client.files.create(
            file=("tokens.jsonl", line("t", f"{marker} reach me at {EMAIL}") + b"\n"), purpose="batch"
        )
        assert EMAIL.encode() not in deployment.stored_bytes()
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        done = wait_done(client, batch.id)
        assert done.request_counts.completed == 1
        client.files.content(done.output_file_id).read()
    sent = [str(r.body) for r in sim.requests if marker in str(r.body)]
    assert len(sent) == 1 and EMAIL not in sent[0]
    assert EMAIL.encode() not in deployment.stored_bytes()


async def test_a_line_the_redaction_blocks_is_kept_as_its_error_and_the_rest_as_written() -> None:
    """The upload's stages alone (admit, redact; no policy block: the config's redaction),
    real ones, over a file whose first line carries a secret the tenant's mode blocks."""
    config = gateway_config(
        {"local": openai_upstream("http://127.0.0.1:9/v1")},
        {"chat": [{"upstream": "local", "model": "sim-model"}]},
        redaction={"request": "block", "response": "off", "entities": ["API_KEY"]},
    )
    stages: list[Stage] = [
        Admit(keyring_from(config, tenants_from(config))),
        Redact(RedactionSettings.from_config(config), RedactionCounters()),
    ]
    files = InputFiles(lambda: Pipeline(stages, Forwarder({}), (), ()))
    content = b"\n".join(
        [line("secret", f"my token is {GITHUB}"), b"", line("clean", "hello", url="/v1/chat/completions")]
    )
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    stored = await files.govern("file-test", content, headers, max_lines=2)
    assert GITHUB.encode() not in stored
    secret, clean = read_lines(stored, "/v1/chat/completions", 10)
    assert secret.custom_id == "secret" and secret.body == b""
    assert secret.error is not None and secret.error.status == 400
    assert secret.error.code == "sensitive_data_blocked" and "GITHUB_TOKEN" in secret.error.message
    assert clean.error is None and clean.line == 1
    assert orjson.loads(clean.body) == orjson.loads(line("clean", "hello"))["body"]  # max_tokens as written
    with pytest.raises(InvalidRequest) as refused:  # more than a batch may have: nothing decided
        await files.govern("file-test", content + b"\n" + line("third", "hi"), headers, max_lines=2)
    assert refused.value.code == "too_many_requests"


async def test_an_upload_no_decision_can_be_had_for_is_refused_whole() -> None:
    """The policy engine failing (an OPA answering 503) is the gateway's failure, not the
    lines': the upload is refused (and retried by the client), no line stored as refused."""
    config = gateway_config(
        {"local": openai_upstream("http://127.0.0.1:9/v1")},
        {"chat": [{"upstream": "local", "model": "sim-model"}]},
    )
    content = b"\n".join(line(f"l{i}", f"line {i}") for i in range(40))
    with opa_protocol_server(str(SHIPPED_POLICIES)) as opa:
        opa.fail_status = 503
        engine = OpaEngine(
            PolicyConfig.model_validate(
                {"dir": str(SHIPPED_POLICIES), "engine": "opa", "opa": {"url": opa.url, "timeout_ms": 2000}}
            )
        )
        try:
            stages: list[Stage] = [
                Admit(keyring_from(config, tenants_from(config))),
                Decide(engine, {"chat": ["local"]}, cache=None, audit=None, timeout_s=5),
            ]
            files = InputFiles(lambda: Pipeline(stages, Forwarder({}), (), ()))
            with pytest.raises(PolicyUnavailable):
                await files.govern("file-x", content, {"authorization": f"Bearer {TEST_KEY}"}, max_lines=100)
        finally:
            await engine.aclose()
