"""route: model alias -> the ordered candidates this tenant may be served from, and the
session key of a conversation that named none (its prompt family, gateway/routing/fingerprint.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.errors import NotFound, PermissionDenied
from gateway.exchange import Candidate, Exchange
from gateway.routing.fingerprint import prompt_family_key


class Route:
    name = "route"

    def __init__(self, routes: Mapping[str, Sequence[Candidate]]) -> None:
        self._routes = {alias: tuple(candidates) for alias, candidates in routes.items()}

    async def __call__(self, exchange: Exchange) -> None:
        alias = exchange.model_alias
        tenant = exchange.tenant
        candidates = self._routes.get(alias)
        # Unknown and forbidden aliases get the same answer, so a key cannot probe for others' models.
        if candidates is None or tenant is None or not tenant.may_use(alias):
            raise NotFound(
                f"The model '{alias}' does not exist or you do not have access to it.",
                param="model",
                code="model_not_found",
            )
        decision = exchange.decision
        if decision is not None and decision.route.upstreams is not None:
            permitted = set(decision.route.upstreams)
            candidates = tuple(c for c in candidates if c.upstream in permitted)
            if not candidates:
                raise PermissionDenied(
                    f"Denied by policy: no upstream serving model '{alias}' is permitted for this request.",
                    code="policy_denied",
                )
        if decision is not None and decision.route.model_class is not None:
            wanted = decision.route.model_class
            candidates = tuple(c for c in candidates if c.model_class == wanted)
            if not candidates:
                raise PermissionDenied(
                    f"Denied by policy: model '{alias}' has no candidate of class '{wanted}'.",
                    code="policy_denied",
                )
        exchange.candidates = list(candidates)
        if exchange.session_key is None:
            exchange.session_key = prompt_family_key(tenant.name, exchange.body)

    def aliases_for(self, allowed: frozenset[str] | None) -> list[str]:
        return [alias for alias in self._routes if allowed is None or alias in allowed]
