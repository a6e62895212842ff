"""route: which aliases a key's tenant may use, and one answer for unknown and forbidden ones."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import HELLO, chat_body, openai_error, recorded
from tests.servers import OTHER_TENANT_KEY, RunningGateway

ALL_ALIASES = [
    "chat",
    "embed",
    "failover",
    "dead",
    "dead-first",
    "impatient",
    "paced",
    "misconfigured",
    "faulty",
]


@pytest.fixture(scope="module")
def beta(gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.base_url, api_key=OTHER_TENANT_KEY, max_retries=0) as oai:
        yield oai


def test_models_lists_every_alias_for_an_unrestricted_tenant(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ALL_ALIASES
    assert {m.object for m in models.data} == {"model"}
    assert {m.owned_by for m in models.data} == {"tollgate"}


def test_models_lists_only_the_tenants_aliases(beta: openai.OpenAI) -> None:
    assert [m.id for m in beta.models.list().data] == ["chat"]


def test_models_needs_a_key(gateway: RunningGateway) -> None:
    error = openai_error(httpx.get(gateway.url + "/v1/models"), 401)
    assert error["code"] == "missing_api_key"


def test_tenant_uses_its_alias(beta: openai.OpenAI, upstream: RunningSimulator) -> None:
    response = beta.chat.completions.create(model="chat", messages=HELLO)
    assert response.model == "sim-model"


def test_unknown_model_is_404_model_not_found(
    client: openai.OpenAI, upstream: RunningSimulator, request_id: str
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(
            model="gpt-unknown", messages=HELLO, extra_headers={"x-request-id": request_id}
        )
    assert caught.value.status_code == 404
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"
    assert caught.value.type == "invalid_request_error"
    assert recorded(upstream, request_id) == []


def test_forbidden_model_looks_exactly_like_an_unknown_one(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    headers = {"authorization": f"Bearer {OTHER_TENANT_KEY}"}
    forbidden = openai_error(
        httpx.post(gateway.url + "/v1/embeddings", json={"model": "embed", "input": "x"}, headers=headers),
        404,
    )
    unknown = openai_error(
        httpx.post(gateway.url + "/v1/embeddings", json={"model": "nope", "input": "x"}, headers=headers), 404
    )
    assert forbidden["code"] == unknown["code"] == "model_not_found"
    assert forbidden["param"] == unknown["param"] == "model"
    assert forbidden["message"] == unknown["message"].replace("'nope'", "'embed'")
    assert upstream.requests == []


def test_forbidden_model_raises_not_found_in_openai_client(beta: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        beta.chat.completions.create(**chat_body("failover"))
    assert caught.value.code == "model_not_found"
