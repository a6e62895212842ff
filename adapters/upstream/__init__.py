"""Upstream adapters, one module each; `UPSTREAM_KINDS` is the registry config names them by."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapters.upstream.openai_compat import OpenAICompatUpstream
from adapters.upstream.workers_ai import WorkersAIUpstream
from gateway.ports import Upstream

UPSTREAM_KINDS: dict[str, Callable[[str, Any], Upstream]] = {
    "openai_compat": OpenAICompatUpstream,
    "workers_ai": WorkersAIUpstream,
}


def build_upstream(name: str, config: Any) -> Upstream:
    return UPSTREAM_KINDS[config.kind](name, config)
