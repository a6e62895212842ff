"""`tollgate keys create --append` on keys files of every shape: the result always parses to
the old keys plus the new one; a file that is not a keys file is refused untouched and no
key is shown."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.cli import main
from gateway.config import load_keys_file
from gateway.keys import hash_key
from gateway.keys_file import KeysFileError, append_key, key_entry

OLD = {"tenant": "alpha", "hash": "sha256:" + "1" * 64, "label": "old"}
NEW = key_entry("beta", "sha256:" + "2" * 64, 'ci: "nightly" #1')


def keys_in(path: Path) -> list[dict[str, str]]:
    keys: list[dict[str, str]] = yaml.safe_load(path.read_text())["keys"]
    return keys


@pytest.mark.parametrize(
    ("text", "rewritten"),
    [
        ("keys: []\n", True),
        ("keys: [{tenant: alpha, hash: 'sha256:" + "1" * 64 + "', label: old}]\n", True),
        ("keys:\n  - {tenant: alpha, hash: 'sha256:" + "1" * 64 + "', label: old}\n", False),
        ("# my keys\nkeys:\n  - tenant: alpha\n    hash: 'sha256:" + "1" * 64 + "'\n    label: old", False),
        ("keys:\n- {tenant: alpha, hash: 'sha256:" + "1" * 64 + "', label: old}\n", True),
    ],
    ids=[
        "empty flow list",
        "flow list",
        "block list",
        "block mapping, comment, no final newline",
        "keys not last",
    ],
)
def test_an_entry_is_added_to_a_keys_file_of_any_shape(tmp_path: Path, text: str, rewritten: bool) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    result = append_key(path, NEW)
    assert result.rewritten is rewritten
    old = [OLD] if "alpha" in text else []
    assert keys_in(path) == [*old, NEW]
    assert [k.label for k in load_keys_file(path)] == [*(["old"] if old else []), NEW["label"]]
    assert path.stat().st_mode & 0o777 == 0o600
    if not rewritten and text.startswith("#"):
        assert path.read_text().startswith("# my keys\n")  # comments kept


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n"])
def test_an_empty_or_missing_file_gets_a_keys_list(tmp_path: Path, text: str) -> None:
    path = tmp_path / "keys.yaml"
    if text:
        path.write_text(text)
    append_key(path, NEW)
    assert keys_in(path) == [NEW]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("keys: [unclosed\n", "not valid YAML"),
        ("- just a list\n", "a mapping"),
        ("keys: {alpha: 1}\n", "must be a list"),
    ],
)
def test_a_file_that_is_not_a_keys_file_is_refused_untouched(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    with pytest.raises(KeysFileError, match=why):
        append_key(path, NEW)
    assert path.read_text() == text


def test_the_cli_shows_no_key_when_it_cannot_store_its_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("keys: {broken: true}\n")
    assert main(["keys", "create", "--tenant", "alpha", "--append", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "must be a list" in captured.err


def test_the_cli_appends_to_an_empty_flow_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("keys: []\n")
    assert main(["keys", "create", "--tenant", "alpha", "--label", "ops", "--append", str(path)]) == 0
    captured = capsys.readouterr()
    key = captured.out.strip()
    assert [(k.tenant, k.hash, k.label) for k in load_keys_file(path)] == [("alpha", hash_key(key), "ops")]
    assert "comments are gone" in captured.err
