"""What an OPA server's error answer says, in words a client and an operator can act on.

OPA answers a failed evaluation with 500 and `{"code": "internal_error", "message": ...}`
whose message holds the error as `file:row: code: text` (`authz.rego:12:
eval_conflict_error: complete rules must not produce multiple outputs`). A conflict names
its rule the way the embedded engine does (`rule gateway.authz.limits has more than one
value`) when the policy directory the gateway was given holds that file: the rule is the
one whose head is on that row. Otherwise the location and OPA's own words are kept.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

_LOCATED = re.compile(r"(?P<file>[^\s:]+\.rego):(?P<row>\d+): (?P<code>[a-z_]+): (?P<text>[^\n]+)")
_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)", re.MULTILINE)
_RULE_HEAD = re.compile(r"^\s*(?:default\s+)?([A-Za-z_][\w]*)")
_MAX_CHARS = 300


def describe_error(body: bytes, policy_dir: str | None) -> str | None:
    """A one-line reason for an OPA error answer; None when the answer says nothing usable."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    message = answer.get("message") if isinstance(answer, dict) else None
    if not isinstance(message, str) or not message.strip():
        return None
    found = _LOCATED.search(message)
    if found is None:
        return message.strip()[:_MAX_CHARS]
    where = f"{Path(found['file']).name}:{found['row']}"
    if found["code"] == "eval_conflict_error":
        rule = _rule_at(policy_dir, found["file"], int(found["row"]))
        if rule is not None:
            return f"rule {rule} has more than one value for this input (its definitions conflict, {where})"
    return f"{found['code']} at {where}: {found['text'].strip()}"[:_MAX_CHARS]


def _rule_at(policy_dir: str | None, file: str, row: int) -> str | None:
    """`package.rule` for the rule whose head is on `row` of `file`, read from the directory."""
    if not policy_dir:
        return None
    root = Path(policy_dir).resolve()
    path = (root / file.lstrip("/")).resolve()
    if not path.is_file():
        path = (root / Path(file).name).resolve()
    if root not in path.parents or not path.is_file():
        return None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    package = _PACKAGE.search("\n".join(lines))
    if package is None or not 0 < row <= len(lines):
        return None
    head = _RULE_HEAD.match(lines[row - 1])
    return f"{package.group(1)}.{head.group(1)}" if head else None
