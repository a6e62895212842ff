"""Adding a key's hash to a keys file without ever leaving it unreadable.

A keys file is YAML with a `keys:` list (`tollgate keys create --append`, `tollgate dev`).
An entry is appended as one more line of the list when the file's own text allows it (its
comments and layout are kept); the result is parsed again and must hold exactly the old
entries plus the new one. Otherwise (`keys: []`, a flow-style list, `keys:` not last) the
file is rewritten from its parsed content, which loses its comments and says so. A file that
is not a keys file (not YAML, not a mapping, `keys` not a list) is refused and left as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gateway.config import ConfigError


class KeysFileError(ConfigError):
    """The file cannot take the entry; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class Appended:
    path: Path
    rewritten: bool  # the file was rewritten from its parsed content (its comments are gone)


def key_entry(tenant: str, key_hash: str, label: str) -> dict[str, str]:
    return {"tenant": tenant, "hash": key_hash, "label": label}


def entry_line(entry: dict[str, str]) -> str:
    """One list item in flow style; JSON strings are valid YAML double-quoted scalars."""
    fields = ", ".join(f"{name}: {json.dumps(value)}" for name, value in entry.items())
    return f"  - {{{fields}}}"


def append_key(path: Path, entry: dict[str, str]) -> Appended:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    data = _parsed(path, text)
    old_keys = list(data.get("keys") or [])
    wanted = {**data, "keys": [*old_keys, entry]}
    appended = _appended_text(text, "keys" in data, entry)
    rewritten = False
    if _parse_or_none(appended) != wanted:
        appended = (
            "# Tollgate API keys (hashes only). Rewritten by `tollgate keys create`.\n"
            + yaml.safe_dump(wanted, sort_keys=False, default_flow_style=False)
        )
        rewritten = True
    _write_private(path, appended)
    return Appended(path, rewritten)


def _parsed(path: Path, text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise KeysFileError(f"{path}: not valid YAML ({exc}); fix it, then add the key again") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise KeysFileError(f"{path}: a keys file is a mapping with a `keys:` list")
    keys = data.get("keys")
    if keys is not None and not isinstance(keys, list):
        raise KeysFileError(f"{path}: `keys` must be a list (it is a {type(keys).__name__})")
    return data


def _appended_text(text: str, has_keys: bool, entry: dict[str, str]) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    if not has_keys:
        text += "keys:\n"
    return text + entry_line(entry) + "\n"


def _parse_or_none(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def _write_private(path: Path, text: str) -> None:
    """Replace the file in one step (never half-written), readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
