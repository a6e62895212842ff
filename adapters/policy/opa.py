"""A policy engine behind an OPA server's REST Data API.

One request per decision, `POST {url}/v1/data/{entrypoint}?provenance=true` with
`{"input": ...}`, on the gateway's own keep-alive HTTP client (adapters.upstream.http_client)
with a short total timeout. OPA answers `{"result": ...}`, without `result` when the
decision is undefined, with `decision_id` when its decision log is on and with the bundle
revisions under `provenance`. Only that documented API is used, so any OPA (sidecar,
central, bundle-fed) serves. A server that is down, slow or failing refuses the request
(fail closed); the pool reconnects by itself once the server is back.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from adapters.policy.opa_errors import describe_error
from adapters.upstream.http_client import HttpClient
from gateway.config import PolicyConfig
from gateway.errors import PolicyUnavailable, UpstreamError
from gateway.ports import EngineReadiness, EngineResult, EvaluationQueue

logger = logging.getLogger("tollgate.policy")

UNKNOWN_REVISION = "opa"
HEALTH_TIMEOUT_S = 1.0
_HEADERS = {"content-type": "application/json", "accept": "application/json"}


class OpaEngine:
    name = "opa"

    def __init__(self, config: PolicyConfig) -> None:
        opa = config.opa
        if opa is None:
            raise ValueError("policy.opa is required for engine opa")
        self._url = f"{opa.url}/v1/data/{config.entrypoint}?provenance=true"
        # `bundles`: a bundle-fed OPA is healthy only once its bundles are activated.
        self._health_url = f"{opa.url}/health?bundles"
        self._timeout_s = opa.timeout_ms / 1000
        self._client = HttpClient("opa", max_connections=opa.max_connections, connect_timeout=self._timeout_s)
        # The gateway cannot see the server's reloads: its decisions are cached only with a TTL.
        self._cacheable = config.cache.ttl_s is not None
        self._revision = UNKNOWN_REVISION
        # The same files OPA serves, when the gateway has them too: errors then name their rule.
        self._policy_dir = config.dir if Path(config.dir).is_dir() else None

    @classmethod
    async def open(cls, config: PolicyConfig) -> OpaEngine:
        """Nothing is asked of the server yet: a server still starting costs refused requests, not startup."""
        return cls(config)

    @property
    def revision(self) -> str:
        return self._revision

    @property
    def cacheable(self) -> bool:
        return self._cacheable

    async def evaluate(self, input_doc: dict[str, Any]) -> EngineResult:
        body = orjson.dumps({"input": input_doc})
        try:
            response = await self._client.post(self._url, body, _HEADERS, self._timeout_s)
        except UpstreamError as exc:
            logger.warning("OPA request failed", extra={"url": self._url, "error": exc.code})
            raise PolicyUnavailable(
                f"The policy engine (OPA) could not be reached ({exc.code}); the request was refused."
            ) from None
        if response.status != 200:
            logger.warning(
                "OPA answered with an error",
                extra={
                    "url": self._url,
                    "status": response.status,
                    "body": response.body[:300].decode(errors="replace"),
                },
            )
            why = describe_error(response.body, self._policy_dir) if response.status == 500 else None
            if why is not None:  # as the embedded engine says it: the same answer whichever decides
                raise PolicyUnavailable(
                    f"The policy could not be evaluated ({why}); the request was refused."
                )
            raise PolicyUnavailable(
                f"The policy engine (OPA) answered with status {response.status}; the request was refused."
            )
        try:
            answer = orjson.loads(response.body)
        except orjson.JSONDecodeError:
            return EngineResult(None, self._revision, error="OPA's answer is not JSON")
        if not isinstance(answer, dict):
            return EngineResult(None, self._revision, error="OPA's answer is not a JSON object")
        self._revision = _revision(answer.get("provenance")) or self._revision
        decision_id = answer.get("decision_id")
        return EngineResult(
            answer.get("result"), self._revision, decision_id if isinstance(decision_id, str) else None
        )

    async def readiness(self) -> EngineReadiness:
        timeout_s = min(self._timeout_s, HEALTH_TIMEOUT_S)
        try:
            response = await self._client.get(self._health_url, {"accept": "application/json"}, timeout_s)
        except UpstreamError as exc:
            return EngineReadiness(False, f"the policy engine (OPA) cannot be reached ({exc.code})")
        if response.status != 200:
            why = f"the policy engine (OPA) is not healthy (status {response.status})"
            return EngineReadiness(False, why)
        return EngineReadiness(True, "the policy engine (OPA) is healthy")

    def evaluation_queue(self) -> EvaluationQueue | None:
        return None  # requests wait in the HTTP client's connection pool, bounded by policy.opa

    async def aclose(self) -> None:
        await self._client.aclose()


def _revision(provenance: Any) -> str | None:
    """The loaded bundles' revisions, e.g. "authz@3f2a9c": what the decision log records."""
    bundles = provenance.get("bundles") if isinstance(provenance, dict) else None
    if not isinstance(bundles, dict) or not bundles:
        return None
    parts = []
    for name in sorted(bundles):
        info = bundles[name]
        revision = info.get("revision") if isinstance(info, dict) else None
        parts.append(f"{name}@{revision}" if isinstance(revision, str) and revision else name)
    return ",".join(parts)
