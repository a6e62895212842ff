"""Policy revisions shared by every worker process on a machine, through a state directory.

Checking a revision (static checks, compilation, the policy's tests, in a child process)
costs seconds of CPU; done once per worker it took a loaded machine over a minute, with
the workers serving different revisions meanwhile. So one worker checks it, under a file
lock, and leaves in the state directory:

    verdicts/<revision>.json   the outcome, kept by content digest: a revision is never
                               checked twice on this machine
    bundles/<revision>.rbb     the compiled bundle of an accepted revision
    serving.json               the announcement: the revision every worker serves

Every worker reads the announcement at each watch tick (one small file) and swaps to the
announced revision by loading its bundle (a copy of a file, no compilation), so all of
them swap within a tick of each other. Files are written to a temporary name and renamed,
so a reader never sees half of one.

The default directory is under the system's temporary directory, named by a digest of the
policy directory's path, the entrypoint, the regopy version and the user: workers of one
gateway share it, and a verdict never outlives the engine that reached it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from adapters.policy.compiled import CompiledRevision
from adapters.policy.source import PolicyLoadError
from gateway.config import PolicyConfig

_BUNDLE_KEEP_S = 60.0  # a bundle no longer announced is removed after this long (a worker may be copying it)


@dataclass(frozen=True, slots=True)
class Verdict:
    revision: str
    ok: bool
    error: str | None = None  # why it was refused
    tests: str = ""  # e.g. "24 passed, 0 failed"
    cacheable: bool = False
    uncacheable_calls: tuple[str, ...] = ()


def default_state_dir(config: PolicyConfig) -> Path:
    try:
        regopy_version = importlib.metadata.version("regopy")
    except importlib.metadata.PackageNotFoundError:
        regopy_version = "unknown"
    key = "\0".join((str(Path(config.dir).resolve()), config.entrypoint, regopy_version, str(os.getuid())))
    return Path(tempfile.gettempdir()) / f"tollgate-policy-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


class SharedRevisions:
    def __init__(self, directory: Path, entrypoint: str) -> None:
        """Raises PolicyLoadError when the directory is not this user's alone: what it holds
        is served without another check, and the temporary directory is everyone's."""
        self.directory = directory
        self._entrypoint = entrypoint
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
            directory.mkdir(mode=0o700, exist_ok=True)
            found = directory.stat()
            if found.st_uid != os.getuid() or found.st_mode & 0o022:
                raise PolicyLoadError(
                    f"{directory}: the policy state directory must belong to this user and be "
                    "writable by no one else"
                )
            for sub in ("verdicts", "bundles"):
                (directory / sub).mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise PolicyLoadError(f"{directory}: the policy state directory cannot be used ({exc})") from None

    @classmethod
    def for_config(cls, config: PolicyConfig) -> SharedRevisions:
        directory = Path(config.state_dir) if config.state_dir else default_state_dir(config)
        return cls(directory, config.entrypoint)

    def verdict(self, revision: str) -> Verdict | None:
        try:
            doc = orjson.loads((self.directory / "verdicts" / f"{revision}.json").read_bytes())
            return Verdict(
                doc["revision"],
                doc["ok"],
                doc["error"],
                doc["tests"],
                doc["cacheable"],
                tuple(doc["uncacheable_calls"]),
            )
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
            return None

    def record(self, verdict: Verdict, compiled: CompiledRevision | None) -> None:
        """The bundle first, then the verdict: an accepted verdict always has its bundle."""
        if compiled is not None:
            self.save_bundle(compiled)
        doc = {
            "revision": verdict.revision,
            "ok": verdict.ok,
            "error": verdict.error,
            "tests": verdict.tests,
            "cacheable": verdict.cacheable,
            "uncacheable_calls": list(verdict.uncacheable_calls),
        }
        _write_atomically(self.directory / "verdicts" / f"{verdict.revision}.json", orjson.dumps(doc))

    def save_bundle(self, compiled: CompiledRevision) -> None:
        target = self._bundle(compiled.revision)
        partial = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}")
        shutil.copyfile(compiled.bundle_path, partial)
        os.replace(partial, target)

    def has_bundle(self, revision: str) -> bool:
        return self._bundle(revision).is_file()

    def announced(self) -> str | None:
        try:
            revision = orjson.loads((self.directory / "serving.json").read_bytes())["revision"]
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
            return None
        return revision if isinstance(revision, str) else None

    def announce(self, revision: str) -> None:
        _write_atomically(
            self.directory / "serving.json", orjson.dumps({"revision": revision, "at": time.time()})
        )
        self._prune(revision)

    def load(self, verdict: Verdict) -> CompiledRevision | None:
        """The accepted revision from its bundle, in a work directory of this process's own;
        None when its bundle is gone (pruned for a newer one)."""
        workdir = tempfile.mkdtemp(prefix="tollgate-policy-")
        compiled = CompiledRevision(
            verdict.revision, self._entrypoint, verdict.cacheable, verdict.uncacheable_calls, workdir
        )
        try:
            shutil.copyfile(self._bundle(verdict.revision), compiled.bundle_path)
        except OSError:
            return None  # the work directory goes with `compiled`
        return compiled

    @contextlib.contextmanager
    def try_lock(self) -> Iterator[bool]:
        """Yields whether this process now holds the machine's check lock (never waits);
        the lock goes with the process if it dies."""
        fd = os.open(self.directory / "check.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _bundle(self, revision: str) -> Path:
        return self.directory / "bundles" / f"{revision}.rbb"

    def _prune(self, keep: str) -> None:
        cutoff = time.time() - _BUNDLE_KEEP_S
        for path in (self.directory / "bundles").glob("*.rbb"):
            with contextlib.suppress(OSError):
                if path.stem != keep and path.stat().st_mtime < cutoff:
                    path.unlink()


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    partial.write_bytes(data)
    os.replace(partial, path)
