"""`tollgate policy test`, `tollgate policy eval`, and a refused policy stopping `tollgate serve`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main
from tests.policy.conftest import SHIPPED_POLICIES
from tests.policy.golden import input_doc


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_policy_test_runs_the_rego_tests(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out = run(
        capsys, "policy", "test", "--dir", str(SHIPPED_POLICIES), "--config", str(tmp_path / "none.yaml")
    )
    assert code == 0
    assert "PASS  gateway.authz_test.test_an_unknown_tenant_is_denied  (authz_test.rego)" in out
    assert out.rstrip().endswith(" passed, 0 failed")


def test_policy_test_fails_on_a_failing_test(capsys: pytest.CaptureFixture[str], policy_dir: Path) -> None:
    (policy_dir / "authz_test.rego").write_text(
        (policy_dir / "authz_test.rego").read_text() + "\ntest_that_fails if { false }\n"
    )
    code, out = run(capsys, "policy", "test", "--dir", str(policy_dir))
    assert code == 1
    assert "FAIL  gateway.authz_test.test_that_fails" in out
    assert out.rstrip().endswith(" passed, 1 failed")


def test_policy_test_refuses_rego_v0(capsys: pytest.CaptureFixture[str], policy_dir: Path) -> None:
    (policy_dir / "authz.rego").write_text((policy_dir / "authz.rego").read_text() + "\nold { true }\n")
    code, out = run(capsys, "policy", "test", "--dir", str(policy_dir))
    assert code == 2
    assert "authz.rego:" in out and "Rego v0 syntax" in out


@pytest.mark.parametrize(
    ("doc", "code", "verdict"),
    [
        (input_doc(), 0, "ALLOW"),
        (input_doc(model="gpt-9"), 1, "DENY: model gpt-9 is not allowed for tenant demo"),
    ],
)
def test_policy_eval_prints_the_decision_and_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, doc: dict[str, object], code: int, verdict: str
) -> None:
    path = tmp_path / "input.json"
    path.write_text(json.dumps(doc))
    got, out = run(capsys, "policy", "eval", "--input", str(path), "--dir", str(SHIPPED_POLICIES))
    assert got == code
    decision = json.loads(out[: out.rindex("}") + 1])
    assert decision["allow"] is (code == 0)
    assert out.rstrip().endswith(verdict)


def test_policy_eval_names_a_bad_input_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "input.json"
    path.write_text("{not json")
    code, out = run(capsys, "policy", "eval", "--input", str(path), "--dir", str(SHIPPED_POLICIES))
    assert code == 2 and "not valid JSON" in out


def write_config(tmp_path: Path, policy_dir: str) -> Path:
    config = tmp_path / "tollgate.yaml"
    config.write_text(
        "upstreams: {local: {kind: openai_compat, base_url: 'http://127.0.0.1:9/v1'}}\n"
        "models: {m: [{upstream: local, model: m}]}\n"
        "tenants: {demo: {models: ['*']}}\n"
        f"policy: {{dir: '{policy_dir}'}}\n"
    )
    return config


def serve(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_serve_stops_at_a_missing_policy_directory(tmp_path: Path) -> None:
    done = serve(write_config(tmp_path, "no-such-dir"))
    assert done.returncode == 2
    assert "policy.dir" in done.stderr and "no-such-dir is not a directory" in done.stderr


def test_serve_stops_at_a_policy_whose_tests_fail(tmp_path: Path, policy_dir: Path) -> None:
    (policy_dir / "authz_test.rego").write_text(
        (policy_dir / "authz_test.rego").read_text() + "\ntest_that_fails if { false }\n"
    )
    done = serve(write_config(tmp_path, str(policy_dir)))
    assert done.returncode == 2
    assert "the policy is refused: the policy's tests fail" in done.stderr
    assert "test_that_fails" in done.stderr


def test_policy_test_runs_the_tests_on_opas_engine(
    capsys: pytest.CaptureFixture[str], policy_dir: Path
) -> None:
    code, out = run(capsys, "policy", "test", "--engine", "opa", "--dir", str(policy_dir))
    assert code == 0
    assert "PASS  gateway.authz_test.test_an_unknown_tenant_is_denied  (authz_test.rego)" in out
    # A test that leans on the embedded engine's set order passes there and fails on OPA.
    (policy_dir / "order_test.rego").write_text(
        'package gateway.order_test\n\ntest_set_order if concat(",", {"b", "a"}) == "b,a"\n'
    )
    code, out = run(capsys, "policy", "test", "--dir", str(policy_dir))
    assert code == 0 and "PASS  gateway.order_test.test_set_order" in out
    code, out = run(capsys, "policy", "test", "--engine", "opa", "--dir", str(policy_dir))
    assert code == 1 and "FAIL  gateway.order_test.test_set_order  (order_test.rego)" in out
    assert out.rstrip().endswith(" passed, 1 failed")


def test_policy_test_refuses_a_misspelled_variable(
    capsys: pytest.CaptureFixture[str], policy_dir: Path
) -> None:
    """The embedded engine alone would load it, pass every test, and never fire the rule."""
    (policy_dir / "authz.rego").write_text(
        (policy_dir / "authz.rego").read_text()
        + "\ndeny contains msg if {\n\tinput.stream\n"
        + '\tmsg := concat(" ", ["no streams for", tenant_nmae])\n}\n'
    )
    code, out = run(capsys, "policy", "test", "--dir", str(policy_dir))
    assert code == 2
    assert "var tenant_nmae is unsafe" in out and "authz.rego:" in out


def test_policy_test_on_opa_says_how_to_install_the_bindings_when_they_are_missing() -> None:
    """A Python where the package cannot be imported (sys.modules entry None: ImportError)."""
    script = (
        "import sys; sys.modules['opa_bindings'] = None\n"
        "from gateway.cli import main\n"
        f"raise SystemExit(main(['policy', 'test', '--engine', 'opa', '--dir', {str(SHIPPED_POLICIES)!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert "pip install --ignore-requires-python 'opa-golib-python-bindings>=0.4.4'" in done.stdout
