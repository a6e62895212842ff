"""Passed policy checks remembered per user, so that a revision already checked is not
checked again at the next start or reload.

Checking a revision (adapters.policy.check) runs the policy's own tests, which costs the
embedded engine seconds of CPU and gigabytes of memory; a restart of an unchanged policy
would pay it each time. A passed check is kept as one small file, named by a digest of
everything the verdict depends on: the text of every module, the data, the entrypoint,
the regopy version and the checker's own code (every file of this package). Any change
to one of them is another name, so a stale verdict is never found.

Only passed checks are kept: a refused revision is checked again each time, so that its
reason is always fresh. The cache is an optimisation and never a reason to refuse a
start: a missing, corrupt, unreadable or unwritable entry means "check again". As with
the shared state directory, what it holds is trusted without another check, so a
directory that is not this user's alone is not used.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import logging
import os
from pathlib import Path

import orjson

from adapters.policy.check import CheckReport, check_in_child
from adapters.policy.source import PolicySource
from gateway.config import PolicyConfig, cache_dir_from_env

logger = logging.getLogger("tollgate.policy")

_ENTRY_FORMAT = 1  # bumped when the entry's fields change
_SUBDIR = "policy-checks"


class CheckCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def for_config(cls, config: PolicyConfig) -> CheckCache | None:
        """The user's cache (TOLLGATE_CACHE_DIR, else the XDG cache directory); None when
        `policy.check_cache` is off or no home directory is known."""
        if not config.check_cache:
            return None
        try:
            return cls(cache_dir_from_env() / _SUBDIR)
        except RuntimeError:  # Path.home() without HOME and without a passwd entry
            return None

    def key(self, source: PolicySource, entrypoint: str) -> str:
        parts = [
            _ENTRY_FORMAT,
            checker_digest(),
            _regopy_version(),
            entrypoint,
            [[m.path, m.text] for m in source.modules],
            source.data,
        ]
        return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()

    def lookup(self, source: PolicySource, entrypoint: str) -> CheckReport | None:
        """The passed report of an earlier check of exactly this source, else None."""
        key = self.key(source, entrypoint)
        if not self._trusted():
            return None
        try:
            doc = orjson.loads((self.directory / f"{key}.json").read_bytes())
            if doc["key"] != key or not isinstance(doc["tests"], str):
                return None
            return CheckReport(source.revision, True, None, doc["tests"], cached=True)
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
            return None

    def store(self, source: PolicySource, entrypoint: str, report: CheckReport) -> None:
        """Keep a passed report; anything else, or a cache that cannot be written, is left alone."""
        if not report.ok or report.revision != source.revision:
            return
        key = self.key(source, entrypoint)
        doc = {"key": key, "revision": report.revision, "entrypoint": entrypoint, "tests": report.tests}
        try:
            self._make()
            if not self._trusted():
                return
            partial = self.directory / f".{key}.{os.getpid()}.{os.urandom(4).hex()}"
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(orjson.dumps(doc))
            os.replace(partial, self.directory / f"{key}.json")
        except OSError as exc:
            logger.warning(
                "the policy check cache cannot be written; the next start checks again",
                extra={"dir": str(self.directory), "why": str(exc)},
            )

    def _make(self) -> None:
        self.directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.mkdir(mode=0o700, exist_ok=True)

    def _trusted(self) -> bool:
        try:
            found = self.directory.stat()
        except OSError:
            return False
        if found.st_uid != os.getuid() or found.st_mode & 0o022:
            logger.warning(
                "the policy check cache is not used: its directory must belong to this user "
                "and be writable by no one else",
                extra={"dir": str(self.directory)},
            )
            return False
        return True


async def check_with_cache(source: PolicySource, entrypoint: str, cache: CheckCache | None) -> CheckReport:
    """The check of adapters.policy.check, in a child, unless this exact source passed it before."""
    if cache is not None:
        found = cache.lookup(source, entrypoint)
        if found is not None:
            return found
    report = await check_in_child(source, entrypoint)
    if cache is not None and report.ok:
        cache.store(source, entrypoint, report)
    return report


@functools.cache
def checker_digest() -> str:
    """A digest of this package's files: a change to the checker's code is another cache key."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for path in sorted([*package.glob("*.py"), *package.glob("*.json")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def _regopy_version() -> str:
    try:
        return importlib.metadata.version("regopy")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
