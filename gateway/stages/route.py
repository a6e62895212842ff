"""route: model alias -> the ordered candidates this request may be served from.

In order: the alias the client asked for (unknown and forbidden aliases get the same 404);
the alias the policy moved it to (`route.alias`, which must be one the key may use); the
upstreams the policy permits and the model class it names; a split's arm for the session
(`gateway/routing/split.py`) or a live-signal choice (`gateway/routing/choice.py`) first.
A conversation that named no session gets its prompt family's key
(`gateway/routing/fingerprint.py`) before the split, so its turns stay on one arm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.errors import NotFound, PermissionDenied
from gateway.exchange import Candidate, Exchange
from gateway.routing.choice import LiveChoice
from gateway.routing.fingerprint import prompt_family_key
from gateway.routing.split import Split

ROUTED_ALIAS_HEADER = "x-tollgate-routed-alias"


class Route:
    name = "route"

    def __init__(
        self, routes: Mapping[str, Sequence[Candidate]], choices: Mapping[str, LiveChoice] | None = None
    ) -> None:
        self._routes = {alias: tuple(candidates) for alias, candidates in routes.items()}
        self._splits = {alias: split for alias, c in self._routes.items() if (split := Split(c))}
        self._choices = dict(choices or {})

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
        rules = decision.route if decision is not None else None
        if rules is not None and rules.alias is not None and rules.alias != alias:
            alias = rules.alias
            candidates = self._routes.get(alias)
            if candidates is None or not tenant.may_use(alias):
                raise PermissionDenied(
                    f"Denied by policy: the policy routes this request to model '{alias}', "
                    "which this key may not use.",
                    code="policy_denied",
                )
            exchange.routed_alias = alias
            exchange.response_headers[ROUTED_ALIAS_HEADER] = alias
        if rules is not None and rules.upstreams is not None:
            permitted = set(rules.upstreams)
            candidates = tuple(c for c in candidates if c.upstream in permitted)
            if not candidates:
                raise PermissionDenied(
                    f"Denied by policy: no upstream serving model '{alias}' is permitted for this request.",
                    code="policy_denied",
                )
        if rules is not None and rules.model_class is not None:
            wanted = rules.model_class
            candidates = tuple(c for c in candidates if c.model_class == wanted)
            if not candidates:
                raise PermissionDenied(
                    f"Denied by policy: model '{alias}' has no candidate of class '{wanted}'.",
                    code="policy_denied",
                )
        if exchange.session_key is None:
            exchange.session_key = prompt_family_key(tenant.name, exchange.body)
        split = self._splits.get(alias)
        if split is not None:
            exchange.candidates = split.ordered(exchange.session_key, candidates)
            return
        choice = self._choices.get(alias)
        if choice is not None:
            exchange.candidates = choice.ordered(exchange.session_key, candidates)
            return
        exchange.candidates = list(candidates)

    def aliases_for(self, allowed: frozenset[str] | None) -> list[str]:
        return [alias for alias in self._routes if allowed is None or alias in allowed]
