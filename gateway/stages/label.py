"""label: the request's workflow and priority, from its headers or its key's defaults.

Both reach the policy input, the spend ledger and the spend metrics, so neither is ever
free text: the workflow is a name listed in `routing.workflows`, `other` (a name not
listed) or `default` (none given); the priority is one of three words, and anything else
is refused with 400.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.errors import InvalidRequest
from gateway.exchange import Exchange, Principal
from gateway.routing_config import PRIORITIES

WORKFLOW_HEADER = "x-workflow"
PRIORITY_HEADER = "x-priority"
DEFAULT_WORKFLOW = "default"
OTHER_WORKFLOW = "other"
DEFAULT_PRIORITY = "normal"

_PRIORITIES = frozenset(PRIORITIES)


class Label:
    name = "label"

    def __init__(self, workflows: Iterable[str]) -> None:
        self._workflows = frozenset(workflows)

    async def __call__(self, exchange: Exchange) -> None:
        principal = exchange.principal
        headers = exchange.headers
        exchange.workflow = self.workflow(headers.get(WORKFLOW_HEADER), principal)
        exchange.priority = priority(headers.get(PRIORITY_HEADER), principal)

    def workflow(self, header: str | None, principal: Principal | None) -> str:
        value = header.strip() if header is not None else ""
        if not value:
            default = principal.default_workflow if principal is not None else None
            return default if default is not None else DEFAULT_WORKFLOW
        return value if value in self._workflows else OTHER_WORKFLOW


def priority(header: str | None, principal: Principal | None) -> str:
    """The request's priority; raises InvalidRequest for a value that is not one of the three."""
    if header is None or not header.strip():
        default = principal.default_priority if principal is not None else None
        return default if default is not None else DEFAULT_PRIORITY
    value = header.strip().lower()
    if value not in _PRIORITIES:
        raise InvalidRequest(
            f"Invalid {PRIORITY_HEADER} header: expected one of critical, normal or background.",
            param=PRIORITY_HEADER,
            code="invalid_header",
        )
    return value
