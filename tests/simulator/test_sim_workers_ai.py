"""The Cloudflare Workers AI surface (``/client/v4/accounts/{id}/ai/...``) and API-key checks."""

from __future__ import annotations

import aiohttp
import openai
import pytest

from simulator import SimConfig, Simulator
from tests.simulator.bodies import chat_body, sse_data, sse_json

KIMI = "@cf/moonshotai/kimi-k2.6"


def _run_url(sim: Simulator, model: str = KIMI) -> str:
    return f"{sim.workers_ai_base_url}/accounts/0123abcd/ai/run/{model}"


async def test_native_run_is_wrapped_in_envelope(sim: Simulator, http: aiohttp.ClientSession) -> None:
    body = {"messages": chat_body("hello there")["messages"], "x_sim": {"echo": True}}
    async with http.post(_run_url(sim), json=body) as resp:
        assert resp.status == 200
        document = await resp.json()
    assert document["success"] is True and document["errors"] == [] and document["messages"] == []
    result = document["result"]
    assert result["object"] == "chat.completion"
    assert result["model"] == KIMI
    assert result["choices"][0]["message"]["content"] == "hello there"
    assert result["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert sim.requests[-1].path == "/client/v4/accounts/0123abcd/ai/run/@cf/moonshotai/kimi-k2.6"


async def test_native_prompt_input(sim: Simulator, http: aiohttp.ClientSession) -> None:
    async with http.post(_run_url(sim), json={"prompt": "say it", "x_sim": {"echo": True}}) as resp:
        assert (await resp.json())["result"]["choices"][0]["message"]["content"] == "say it"


async def test_native_stream_is_raw_sse(sim: Simulator, http: aiohttp.ClientSession) -> None:
    body = {
        "messages": chat_body("hi")["messages"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with http.post(_run_url(sim), json=body) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        text = await resp.text()
    assert sse_data(text)[-1] == "[DONE]"
    chunks = sse_json(text)
    assert "result" not in chunks[0]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == KIMI for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 16


async def test_native_embeddings(sim: Simulator, http: aiohttp.ClientSession) -> None:
    async with http.post(_run_url(sim, "@cf/baai/bge-large-en-v1.5"), json={"text": ["a", "b"]}) as resp:
        result = (await resp.json())["result"]
    assert result["shape"] == [2, 8] and len(result["data"]) == 2


async def test_openai_compatible_paths_are_not_wrapped(sim: Simulator) -> None:
    client = openai.AsyncOpenAI(
        base_url=f"{sim.workers_ai_base_url}/accounts/acct/ai/v1", api_key="cf-token", max_retries=0
    )
    try:
        completion = await client.chat.completions.create(model=KIMI, messages=chat_body("hi")["messages"])
        assert completion.model == KIMI and completion.choices[0].message.content
        embedded = await client.embeddings.create(model="@cf/baai/bge-large-en-v1.5", input="hello")
        assert len(embedded.data[0].embedding) == 8
    finally:
        await client.close()
    assert [r.workers_ai_replica is not None for r in sim.requests] == [True, True]


@pytest.mark.parametrize("path", ["/ai/run/@cf/moonshotai/kimi-k2.6", "/ai/v1/chat/completions"])
@pytest.mark.parametrize(
    ("status", "code", "retry_after"),
    [(429, 3040, 2), (429, 3036, None), (403, 5035, None), (408, 3007, 0.5)],
)
async def test_fault_uses_the_workers_ai_error_envelope(
    sim: Simulator, http: aiohttp.ClientSession, path: str, status: int, code: int, retry_after: float | None
) -> None:
    fault: dict[str, object] = {"status": status, "code": code, "message": "Capacity temporarily exceeded"}
    if retry_after is not None:
        fault["retry_after"] = retry_after
    body = chat_body("hi", model=KIMI, x_sim={"fault": fault})
    async with http.post(f"{sim.workers_ai_base_url}/accounts/acct{path}", json=body) as resp:
        assert resp.status == status
        assert resp.headers.get("Retry-After") == (None if retry_after is None else str(retry_after))
        document = await resp.json()
    assert document == {
        "result": None,
        "success": False,
        "errors": [{"code": code, "message": "Capacity temporarily exceeded"}],
        "messages": [],
    }


async def test_malformed_json_on_workers_ai_is_400_envelope(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    async with http.post(_run_url(sim), data=b"{oops") as resp:
        assert resp.status == 400
        document = await resp.json()
    assert document["success"] is False and document["result"] is None
    assert isinstance(document["errors"][0]["code"], int)


async def test_openai_path_fault_has_string_code(sim: Simulator, http: aiohttp.ClientSession) -> None:
    body = chat_body("hi", x_sim={"fault": {"status": 503, "code": 3040}})
    async with http.post(sim.url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 503
        error = (await resp.json())["error"]
    assert error["code"] == "3040" and error["type"] == "server_error"


async def test_api_key_is_enforced(http: aiohttp.ClientSession) -> None:
    async with Simulator(SimConfig(api_key="s3cret")) as sim:
        body = chat_body("hi")
        async with http.post(sim.url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 401
            assert (await resp.json())["error"]["type"] == "authentication_error"
        bad = {"Authorization": "Bearer wrong"}
        async with http.post(_run_url(sim), json=body, headers=bad) as resp:
            assert resp.status == 401
            assert (await resp.json())["success"] is False
        good = {"Authorization": "Bearer s3cret"}
        async with http.post(sim.url + "/v1/chat/completions", json=body, headers=good) as resp:
            assert resp.status == 200
        async with http.post(_run_url(sim), json=body, headers=good) as resp:
            assert resp.status == 200
        async with http.get(sim.url + "/v1/models") as resp:
            assert resp.status == 401
        async with http.get(sim.url + "/health") as resp:
            assert resp.status == 200
        assert [r.status for r in sim.requests] == [401, 401, 200, 200, 401, 200]


async def test_models_search_is_enveloped_and_needs_the_token() -> None:
    async with Simulator(SimConfig(api_key="cf-token")) as sim:
        url = f"{sim.workers_ai_base_url}/accounts/acct/ai/models/search?per_page=1"
        async with aiohttp.ClientSession() as session:
            async with session.get(url, headers={"Authorization": "Bearer cf-token"}) as ok:
                body = await ok.json()
            async with session.get(url) as denied:
                denied_body = await denied.json()
        assert ok.status == 200 and body["success"] is True and body["result"]
        assert denied.status == 401 and denied_body["success"] is False
