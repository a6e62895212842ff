"""Redaction settings per tenant, compiled once from config.

The policy decision, when there is one, chooses the modes and the kinds
(`Decision.redact`); config supplies the rest (custom kinds, fail-open, tool
descriptions) and the modes and kinds for requests without a decision. A tenant's own
`redaction` block replaces the top-level one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gateway.config import GatewayConfig, RedactionConfig
from gateway.policy.decision import RedactRules
from gateway.redaction.detector import Catalog, Detector
from gateway.redaction.entities import BUILTIN, EntityKind, custom_pattern, literal_terms, select
from gateway.redaction.scrub import Scrubber

_MAX_SELECTIONS = 256
_MIN_SECRET_CHARS = 6  # a shorter configured credential would mask ordinary words in logs


@dataclass(frozen=True, slots=True)
class TenantRedaction:
    rules: RedactRules  # used when there is no policy decision
    catalog: Catalog
    fail_open: bool
    scan_tool_descriptions: bool
    # The kinds each list of names selects: a request's list is its decision's or the rules',
    # and the same few recur.
    _selected: dict[tuple[str, ...], frozenset[str]] = field(default_factory=dict, compare=False, repr=False)

    def detector(self, names: Iterable[str]) -> Detector:
        """A detector for one request, for the kinds (or groups) named; none named means every kind."""
        key = tuple(names)
        selected = self._selected.get(key)
        if selected is None:
            if len(self._selected) >= _MAX_SELECTIONS:
                self._selected.clear()
            selected = frozenset(kind.name for kind in select(key, self.catalog.kinds))
            self._selected[key] = selected
        return self.catalog.detector(selected, per_request=True)


class RedactionSettings:
    def __init__(self, default: TenantRedaction, tenants: Mapping[str, TenantRedaction]) -> None:
        self._default = default
        self._tenants = dict(tenants)

    def for_tenant(self, name: str) -> TenantRedaction:
        return self._tenants.get(name, self._default)

    @classmethod
    def from_config(cls, config: GatewayConfig, builtin: Catalog | None = None) -> RedactionSettings:
        builtin = builtin or Catalog(BUILTIN)
        catalogs: dict[tuple[EntityKind, ...], Catalog] = {(): builtin}

        def settle(block: RedactionConfig) -> TenantRedaction:
            custom = custom_kinds(block)
            catalog = catalogs.get(custom)
            if catalog is None:
                catalog = catalogs[custom] = Catalog((*BUILTIN, *custom))
            return TenantRedaction(
                RedactRules(block.request, block.response, tuple(block.entities)),
                catalog,
                block.fail_open,
                block.scan_tool_descriptions,
            )

        default = settle(config.redaction)
        tenants = {
            name: settle(tenant.redaction) for name, tenant in config.tenants.items() if tenant.redaction
        }
        return cls(default, tenants)


def custom_kinds(block: RedactionConfig) -> tuple[EntityKind, ...]:
    return (
        *(custom_pattern(name, pattern) for name, pattern in sorted(block.patterns.items())),
        *(literal_terms(name, terms) for name, terms in sorted(block.terms.items()) if any(terms)),
    )


def configured_secrets(config: GatewayConfig) -> list[str]:
    """Credentials written in the config (upstream keys and tokens, the request-id key): never to
    appear in a log."""
    found: list[str] = []
    if config.server.request_id_key:
        found.append(config.server.request_id_key)
    for upstream in config.upstreams.values():
        for name in ("api_key", "api_token"):
            value = getattr(upstream, name, None)
            if isinstance(value, str) and len(value) >= _MIN_SECRET_CHARS:
                found.append(value)
    return found


def scrubber_for(config: GatewayConfig, builtin: Catalog | None = None) -> Scrubber:
    """The scrubber for everything this gateway persists: every built-in kind, every custom
    kind of any tenant, and the configured credentials, whatever the tenants' modes."""
    blocks = [config.redaction, *(t.redaction for t in config.tenants.values() if t.redaction)]
    custom: dict[str, EntityKind] = {}
    for block in blocks:
        for kind in custom_kinds(block):
            custom.setdefault(kind.name, kind)
    catalog = builtin if not custom and builtin else Catalog((*BUILTIN, *custom.values()))
    return Scrubber(catalog.detector(), configured_secrets(config))
