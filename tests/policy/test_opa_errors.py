"""An OPA server's error answer in words: a conflict names its rule as the embedded engine
does, other errors keep OPA's location and text, and nothing outside the policy directory is
ever read to find a rule."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from adapters.policy.opa_errors import describe_error

POLICY = """package gateway.authz

default allow := false

limits := {"max_tokens": 1} if input.data_class == "offsite"
"""


def answer(message: str) -> bytes:
    return orjson.dumps({"code": "internal_error", "message": message})


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    (tmp_path / "conflict.rego").write_text(POLICY)
    return tmp_path


def test_a_conflict_names_its_rule_from_the_policy_files(policy_dir: Path) -> None:
    said = describe_error(
        answer("conflict.rego:5: eval_conflict_error: complete rules must not produce multiple outputs"),
        str(policy_dir),
    )
    assert said == (
        "rule gateway.authz.limits has more than one value for this input"
        " (its definitions conflict, conflict.rego:5)"
    )


def test_a_server_path_is_matched_by_file_name(policy_dir: Path) -> None:
    said = describe_error(
        answer("1 error occurred: /policies/conflict.rego:3: eval_conflict_error: x"), str(policy_dir)
    )
    assert said is not None and said.startswith("rule gateway.authz.allow has more than one value")


def test_without_the_files_the_location_and_opas_words_are_kept() -> None:
    said = describe_error(
        answer("conflict.rego:5: eval_conflict_error: complete rules must not produce multiple outputs"), None
    )
    assert said == "eval_conflict_error at conflict.rego:5: complete rules must not produce multiple outputs"


def test_other_errors_keep_their_code_and_location(policy_dir: Path) -> None:
    said = describe_error(
        answer("authz.rego:9: eval_type_error: count: operand 1 must be one of {array}"), str(policy_dir)
    )
    assert said == "eval_type_error at authz.rego:9: count: operand 1 must be one of {array}"


@pytest.mark.parametrize("body", [b"not json", b"[]", orjson.dumps({"code": "internal_error"}), answer("  ")])
def test_an_answer_that_says_nothing_usable_gives_none(body: bytes) -> None:
    assert describe_error(body, None) is None


def test_a_message_without_a_location_is_kept_short() -> None:
    assert describe_error(answer("x" * 1000), None) == "x" * 300


def test_no_file_outside_the_policy_directory_is_read(tmp_path: Path) -> None:
    outside = tmp_path / "secret.rego"
    outside.write_text("package stolen\n\nleak := 1\n")
    inside = tmp_path / "policies"
    inside.mkdir()
    said = describe_error(answer("../secret.rego:3: eval_conflict_error: x"), str(inside))
    assert said == "eval_conflict_error at secret.rego:3: x"
