"""A policy directory read into memory: its Rego modules, its data, and a revision name.

Layout, as OPA loads a directory: every `*.rego` file is a module (`*_test.rego` ones hold
the tests), and a file named `data.json` or `data.yaml` holds data placed at the path of
its folder (`policies/data.yaml` is `data`, `policies/tenants/data.yaml` is
`data.tenants`). Hidden files and folders (editor swap files) are ignored.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

DATA_FILES = frozenset({"data.json", "data.yaml", "data.yml"})
TEST_SUFFIX = "_test.rego"

Fingerprint = tuple[tuple[str, int, int, int], ...]


class PolicyLoadError(Exception):
    """The policy directory cannot be used; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class RegoFile:
    path: str  # relative to the policy directory, with forward slashes
    text: str

    @property
    def is_test(self) -> bool:
        return self.path.endswith(TEST_SUFFIX)


@dataclass(frozen=True, slots=True)
class PolicySource:
    directory: str
    modules: tuple[RegoFile, ...]  # sorted by path, tests included
    data: dict[str, Any]
    revision: str  # a digest of every file's path and content

    @property
    def policy_modules(self) -> tuple[RegoFile, ...]:
        return tuple(m for m in self.modules if not m.is_test)

    @property
    def test_modules(self) -> tuple[RegoFile, ...]:
        return tuple(m for m in self.modules if m.is_test)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "directory": self.directory,
                "modules": [[m.path, m.text] for m in self.modules],
                "data": self.data,
                "revision": self.revision,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> PolicySource:
        doc = orjson.loads(raw)
        return cls(
            doc["directory"],
            tuple(RegoFile(path, text) for path, text in doc["modules"]),
            doc["data"],
            doc["revision"],
        )


def policy_files(directory: str | Path) -> list[Path]:
    root = Path(directory)
    if not root.is_dir():
        raise PolicyLoadError(f"{root}: the policy directory does not exist")
    found: list[Path] = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith(".") and (name.endswith(".rego") or name in DATA_FILES):
                found.append(Path(folder) / name)
    return found


def fingerprint(directory: str | Path) -> Fingerprint:
    """Cheap to compute (one stat per file): changes when any policy file is edited, added or removed."""
    root = Path(directory)
    entries: list[tuple[str, int, int, int]] = []
    try:
        for path in policy_files(root):
            stat = path.stat()
            entries.append((path.relative_to(root).as_posix(), stat.st_mtime_ns, stat.st_size, stat.st_ino))
    except (PolicyLoadError, OSError):
        return ()
    return tuple(entries)


def read_policy_dir(directory: str | Path) -> PolicySource:
    root = Path(directory)
    modules: list[RegoFile] = []
    data: dict[str, Any] = {}
    digest = hashlib.sha256()
    for path in policy_files(root):
        relative = path.relative_to(root).as_posix()
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise PolicyLoadError(f"{path}: cannot read ({exc.strerror})") from None
        digest.update(relative.encode() + b"\0" + hashlib.sha256(raw).digest())
        if path.name in DATA_FILES:
            prefix = list(Path(relative).parent.parts)
            _merge(data, prefix, _parse_data(path, raw), path)
        else:
            try:
                modules.append(RegoFile(relative, raw.decode("utf-8")))
            except UnicodeDecodeError:
                raise PolicyLoadError(f"{path}: not UTF-8 text") from None
    if not any(not m.is_test for m in modules):
        raise PolicyLoadError(f"{root}: no .rego policy files")
    return PolicySource(str(root), tuple(modules), data, digest.hexdigest()[:12])


def _parse_data(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise PolicyLoadError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PolicyLoadError(f"{path}: the top level must be an object")
    try:
        orjson.dumps(value)  # YAML may hold dates and other values JSON cannot carry
    except TypeError as exc:
        raise PolicyLoadError(f"{path}: a value cannot be expressed in JSON ({exc})") from None
    return value


def _merge(data: dict[str, Any], prefix: list[str], value: dict[str, Any], path: Path) -> None:
    node = data
    for part in prefix:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise PolicyLoadError(f"{path}: data at {'.'.join(prefix)} conflicts with another data file")
    for key, item in value.items():
        if key in node:
            raise PolicyLoadError(f"{path}: data.{'.'.join([*prefix, key])} is also set by another data file")
        node[key] = item
