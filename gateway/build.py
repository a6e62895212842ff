"""How this process's gateway was built: its request path compiled to C by mypyc
(`TOLLGATE_COMPILE=1`, setup.py) or plain Python, and, in a source checkout, which compiled
modules are older than their sources (built in place, then edited: the edit does not run)."""

from __future__ import annotations

from pathlib import Path

import gateway.exchange

_PACKAGES = ("gateway", "adapters", "telemetry")


def compiled() -> bool:
    """Whether the request path runs compiled (one of its modules tells for all)."""
    return not gateway.exchange.__file__.endswith(".py")


def stale_compiled(root: Path) -> list[str]:
    """The sources under `root` (a checkout) edited after their compiled module was built."""
    stale = []
    for package in _PACKAGES:
        for library in (root / package).rglob("*.so"):
            # The shared library (gateway/_native__mypyc) has no source: never stale.
            source = library.with_name(f"{library.name.split('.', 1)[0]}.py")
            if source.exists() and source.stat().st_mtime > library.stat().st_mtime:
                stale.append(str(source.relative_to(root)))
    return sorted(stale)
