"""A config edit reaches the doors: a key and an alias added to the running gateway's file work
through the Messages and Responses doors and their other routes (count_tokens, models, stored
responses) without a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.gateway.test_config_reload import ACME_KEY, BETA_KEY, base_config, edit
from tests.harness import eventually, free_port
from tests.metering.processes import GatewayProcess, write_config
from tests.processes import process_timeout

pytestmark = [pytest.mark.slow, process_timeout]


@pytest.fixture
def served(upstream_sim: RunningSimulator, tmp_path: Path) -> Iterator[tuple[GatewayProcess, Path]]:
    data = {
        **base_config(upstream_sim, tmp_path),
        "responses": {"sqlite_path": str(tmp_path / "responses.db")},
    }
    config = write_config(tmp_path / "tollgate.yaml", data)
    gateway = GatewayProcess(config, free_port(), 1, tmp_path / "gw.log")
    try:
        yield gateway, config
    finally:
        gateway.stop()


def _status(url: str, key: str) -> int:
    body = {"model": "second", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(url + "/v1/messages", json=body, headers={"x-api-key": key}, timeout=10).status_code


def test_a_key_and_an_alias_added_by_an_edit_work_through_the_doors(
    served: tuple[GatewayProcess, Path],
) -> None:
    gateway, config = served
    assert _status(gateway.url, BETA_KEY) == 401

    def add_beta(data: dict[str, Any]) -> None:
        data["tenants"]["beta"] = {"models": ["second"]}
        data["keys"].append({"tenant": "beta", "hash": hash_key(BETA_KEY)})
        data["models"]["second"] = data["models"]["chat"]

    edit(config, add_beta)
    assert eventually(lambda: _status(gateway.url, BETA_KEY) == 200, seconds=20)
    with (
        anthropic.Anthropic(base_url=gateway.url, api_key=BETA_KEY, max_retries=0) as claude,
        openai.OpenAI(base_url=gateway.url + "/v1", api_key=BETA_KEY, max_retries=0) as oai,
        openai.OpenAI(base_url=gateway.url + "/v1", api_key=ACME_KEY, max_retries=0) as acme,
    ):
        assert (
            claude.messages.count_tokens(
                model="second", messages=[{"role": "user", "content": "hi"}]
            ).input_tokens
            > 0
        )
        assert claude.models.retrieve("second").id == "second"
        assert oai.models.retrieve("second").id == "second"
        with pytest.raises(openai.NotFoundError):
            oai.models.retrieve("chat")  # not beta's
        response = oai.responses.create(model="second", input="hello")
        assert oai.responses.retrieve(response.id).id == response.id
        with pytest.raises(openai.NotFoundError):
            acme.responses.retrieve(response.id)  # another tenant's
