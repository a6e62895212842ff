"""The policy's tests compiled in batches give each test the result it has when all are
compiled together; anything that could make them differ runs them together."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.policy.rego_test_batches import MAX_WITHS_PER_BATCH, batches, source_for_batch
from adapters.policy.rego_tests import rego_test_names, run_rego_tests
from adapters.policy.source import PolicySource, read_policy_dir
from tests.policy.conftest import SHIPPED_POLICIES

POLICY = """package gateway.authz

default allow := false

allow if input.tenant in data.tenants

limit := data.limits[input.tenant]
"""


def module_of_tests(*extra: str, count: int = 6) -> str:
    """`count` tests of two `with`s each (more than one batch), then `extra` statements."""
    body = '\tauthz.allow with input.tenant as "t{i}"\n\t\twith data.tenants as ["t{i}"]\n'
    tests = [f"test_tenant_{i} if {{\n{body.format(i=i)}}}\n" for i in range(count)]
    head = "package gateway.authz_test\n\nimport data.gateway.authz\n\n"
    return head + "\n".join([*tests, *extra])


def source(tmp_path: Path, tests: str) -> PolicySource:
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    (directory / "authz.rego").write_text(POLICY)
    (directory / "authz_test.rego").write_text(tests)
    (directory / "data.yaml").write_text("tenants: [demo]\nlimits: {demo: 10}\n")
    return read_policy_dir(directory)


def names(src: PolicySource) -> list[str]:
    return [name for m in src.test_modules for name in rego_test_names(m.text)]


def test_the_shipped_tests_run_in_batches_and_all_pass() -> None:
    shipped = read_policy_dir(SHIPPED_POLICIES)
    plan = batches(shipped, names(shipped))
    assert plan is not None and len(plan) > 1
    assert sorted(n for batch in plan for n in batch) == sorted(names(shipped))
    report = run_rego_tests(shipped)
    assert report.passed and not report.errors
    assert len(report.outcomes) == len(names(shipped))


def test_a_batch_holds_at_most_its_share_of_withs(tmp_path: Path) -> None:
    src = source(tmp_path, module_of_tests(count=10))
    plan = batches(src, names(src))
    assert plan is not None
    assert all(len(batch) * 2 <= MAX_WITHS_PER_BATCH for batch in plan)
    assert [n for batch in plan for n in batch] == names(src)


def test_a_failing_test_fails_alone_whichever_batch_it_is_in(tmp_path: Path) -> None:
    failing = 'test_a_limit_that_is_wrong if {\n\tauthz.limit == 11 with input.tenant as "demo"\n}\n'
    src = source(tmp_path, module_of_tests(failing, "test_last if { true }\n"))
    assert len(batches(src, names(src)) or []) > 1
    report = run_rego_tests(src)
    assert [o.name for o in report.failed] == ["gateway.authz_test.test_a_limit_that_is_wrong"]
    assert report.summary() == "7 passed, 1 failed" and not report.errors


def test_a_test_defined_twice_keeps_both_definitions(tmp_path: Path) -> None:
    """A rule's definitions are ORed: both must be in the test's batch."""
    twice = 'test_twice if { false }\n\ntest_twice if { authz.allow with input.tenant as "demo" }\n'
    src = source(tmp_path, module_of_tests(twice))
    assert run_rego_tests(src).passed


def test_blanking_keeps_the_line_numbers(tmp_path: Path) -> None:
    src = source(tmp_path, module_of_tests())
    kept = source_for_batch(src, set(names(src)), ["test_tenant_3"])
    [test_module] = kept.test_modules
    [original] = src.test_modules
    assert test_module.text.count("\n") == original.text.count("\n")
    assert rego_test_names(test_module.text) == ["test_tenant_3"]
    line = original.text.splitlines().index("test_tenant_3 if {")
    assert test_module.text.splitlines()[line] == "test_tenant_3 if {"


@pytest.mark.parametrize(
    "reference",
    [
        "test_uses_another if { test_tenant_0 }\n",
        "test_counts_the_package if { count(data.gateway.authz_test) > 1 }\n",
        "test_walks_data if { some k; data[k] }\n",
        "test_walks_the_parent if { some k; data.gateway[k] }\n",
    ],
)
def test_tests_that_may_read_other_tests_run_together(tmp_path: Path, reference: str) -> None:
    src = source(tmp_path, module_of_tests(reference))
    assert batches(src, names(src)) is None


def test_a_test_that_uses_another_sees_it(tmp_path: Path) -> None:
    src = source(tmp_path, module_of_tests("test_uses_another if { test_tenant_0 }\n"))
    report = run_rego_tests(src)
    assert report.passed and report.summary() == "7 passed, 0 failed"


def test_an_imported_parent_package_counts_as_a_reference(tmp_path: Path) -> None:
    src = source(tmp_path, module_of_tests("test_by_alias if { some k; gateway.authz_test[k] }\n"))
    with_import = src.test_modules[0].text.replace(
        "import data.gateway.authz\n", "import data.gateway.authz\nimport data.gateway\n"
    )
    (tmp_path / "policies" / "authz_test.rego").write_text(with_import)
    src = read_policy_dir(tmp_path / "policies")
    assert batches(src, names(src)) is None


def test_an_evaluation_error_is_reported_as_when_the_tests_run_together(tmp_path: Path) -> None:
    """A batch's error sends all tests to one interpreter: the package's error, every test failed."""
    conflict = "x := 1 if input.a\n\nx := 2 if input.a\n\ntest_conflict if { x == 1 with input.a as true }\n"
    src = source(tmp_path, module_of_tests(conflict))
    report = run_rego_tests(src)
    assert not report.passed
    assert len(report.errors) == 1 and report.errors[0].startswith("gateway.authz_test: ")
    assert report.summary() == "0 passed, 7 failed"
