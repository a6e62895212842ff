"""Reading a policy directory: modules, data placed by folder, a revision that follows content."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.policy.source import PolicyLoadError, fingerprint, read_policy_dir


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_modules_tests_and_data_are_read_as_opa_lays_them_out(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "authz.rego": "package a\n",
            "authz_test.rego": "package a_test\n",
            "data.yaml": "defaults: {x: 1}\n",
            "tenants/data.json": '{"demo": {"models": ["m"]}}',
            ".authz.rego.swp": "junk",
            ".hidden/x.rego": "junk",
            "notes.md": "ignored",
        },
    )
    source = read_policy_dir(root)
    assert [m.path for m in source.policy_modules] == ["authz.rego"]
    assert [m.path for m in source.test_modules] == ["authz_test.rego"]
    assert source.data == {"defaults": {"x": 1}, "tenants": {"demo": {"models": ["m"]}}}


def test_the_revision_follows_the_content(tmp_path: Path) -> None:
    root = write(tmp_path, {"a.rego": "package a\n", "data.yaml": "x: 1\n"})
    first = read_policy_dir(root).revision
    assert read_policy_dir(root).revision == first
    write(root, {"data.yaml": "x: 2\n"})
    assert read_policy_dir(root).revision != first


def test_the_fingerprint_changes_on_edit_add_and_remove(tmp_path: Path) -> None:
    root = write(tmp_path, {"a.rego": "package a\n"})
    before = fingerprint(root)
    write(root, {"b.rego": "package b\n"})
    added = fingerprint(root)
    assert added != before
    (root / "b.rego").unlink()
    assert fingerprint(root) != added


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "no .rego policy files"),
        ({"a.rego": "package a\n", "data.yaml": "x: [1\n"}, "not valid YAML"),
        ({"a.rego": "package a\n", "data.json": "[1]"}, "the top level must be an object"),
        (
            {"a.rego": "package a\n", "data.yaml": "t: {a: 1}\n", "t/data.yaml": "a: 2\n"},
            "data.t.a is also set",
        ),
    ],
)
def test_an_unusable_directory_is_refused_with_the_file_named(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    root = write(tmp_path, files)
    with pytest.raises(PolicyLoadError, match=message):
        read_policy_dir(root)


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError, match="does not exist"):
        read_policy_dir(tmp_path / "nope")
