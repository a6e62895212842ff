"""The config file: interpolation, validation messages that name the file and the key, keys_file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, interpolate, load_config
from gateway.keys import hash_key

REPO = Path(__file__).resolve().parents[2]
HASH = hash_key("tg-some-key")

VALID = """\
server:
  port: 9090
upstreams:
  local:
    kind: openai_compat
    base_url: http://127.0.0.1:8081/v1/
models:
  chat:
    - {upstream: local, model: sim-model}
tenants:
  alpha: {}
"""


def _write(tmp_path: Path, text: str, name: str = "tollgate.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(str(path))
    return message


def test_valid_file_loads_with_defaults(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, VALID))
    assert config.server.port == 9090
    assert config.server.max_body_bytes == 4 * 1024 * 1024
    assert config.upstreams["local"].base_url == "http://127.0.0.1:8081/v1"  # trailing slash dropped
    assert config.models["chat"][0].model == "sim-model"
    assert config.tenants["alpha"].models == ["*"]
    assert config.keys == []


def test_the_shipped_config_is_valid() -> None:
    config = load_config(REPO / "tollgate.yaml")
    assert "local" in config.upstreams


# Interpolation


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${HOST}", "gpu-1"),
        ("http://${HOST}:${PORT:-8000}/v1", "http://gpu-1:8000/v1"),
        ("${PORT:-8000}", "8000"),
        ("${EMPTY:-fallback}", "fallback"),
        ("${MISSING:-}", ""),
        ("${HOST:-ignored}", "gpu-1"),
        ("no reference", "no reference"),
        ("$HOST {HOST}", "$HOST {HOST}"),
    ],
)
def test_interpolate(value: str, expected: str) -> None:
    assert interpolate(value, "where", {"HOST": "gpu-1", "EMPTY": ""}) == expected


@pytest.mark.parametrize("value", ["${MISSING}", "${EMPTY}"])
def test_interpolate_unset_without_default_is_an_error(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        interpolate(value, "file.yaml: upstreams.x.api_key", {"EMPTY": ""})
    assert str(caught.value) == (
        f"file.yaml: upstreams.x.api_key: environment variable {value[2:-1]} is not set"
    )


def test_file_values_are_interpolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_TEST_SIM_HOST", "10.1.2.3")
    monkeypatch.delenv("TG_TEST_KEY", raising=False)
    text = VALID.replace("127.0.0.1:8081", "${TG_TEST_SIM_HOST}:${TG_TEST_PORT:-9000}").replace(
        "kind: openai_compat", "kind: openai_compat\n    api_key: ${TG_TEST_KEY:-none}"
    )
    upstream = load_config(_write(tmp_path, text)).upstreams["local"]
    assert upstream.base_url == "http://10.1.2.3:9000/v1"
    assert upstream.api_key == "none"  # type: ignore[union-attr]


def test_unset_variable_names_the_file_and_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TG_TEST_UNSET", raising=False)
    path = _write(tmp_path, VALID.replace("model: sim-model", "model: '${TG_TEST_UNSET}'"))
    message = _error(path)
    assert message == f"{path}: models.chat[0].model: environment variable TG_TEST_UNSET is not set"


def test_references_in_comments_are_not_interpolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TG_TEST_UNSET", raising=False)
    config = load_config(_write(tmp_path, "# api_key: ${TG_TEST_UNSET}\n" + VALID))
    assert config.server.port == 9090


# Validation messages


@pytest.mark.parametrize(
    ("old", "new", "key_path"),
    [
        ("http://127.0.0.1:8081/v1/", "ftp://127.0.0.1/v1", "upstreams.local.base_url"),
        (
            "kind: openai_compat",
            "kind: openai_compat\n    timeouts: {connect_s: 0}",
            "upstreams.local.timeouts.connect_s",
        ),
        ("kind: openai_compat", "kind: openai_compat\n    colour: red", "upstreams.local.colour"),
        ("kind: openai_compat", "kind: telepathy", "upstreams.local"),
        ("port: 9090", "port: 70000", "server.port"),
        ("port: 9090", "prot: 9090", "server.prot"),
        ("model: sim-model", "model: ''", "models.chat.0.model"),
    ],
)
def test_validation_error_names_the_file_and_key_path(
    tmp_path: Path, old: str, new: str, key_path: str
) -> None:
    message = _error(_write(tmp_path, VALID.replace(old, new)))
    assert f"\n  {key_path}: " in message


def test_workers_ai_error_names_the_key_path(tmp_path: Path) -> None:
    text = VALID.replace("models:", "  cf: {kind: workers_ai, api_token: t}\nmodels:")
    assert "\n  upstreams.cf.account_id: Field required" in _error(_write(tmp_path, text))


def test_unknown_upstream_in_models(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, VALID.replace("upstream: local", "upstream: nowhere")))
    assert "models.chat: upstream 'nowhere' is not defined under upstreams" in message


def test_unknown_alias_in_tenant(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, VALID.replace("alpha: {}", "alpha: {models: [chat, gpt-9]}")))
    assert "tenants.alpha.models: 'gpt-9' is not a model alias" in message


def test_alias_without_candidates(tmp_path: Path) -> None:
    text = VALID.replace("  chat:\n    - {upstream: local, model: sim-model}", "  chat: []")
    assert "model alias 'chat' has no candidates" in _error(_write(tmp_path, text))


def test_unknown_tenant_in_keys(tmp_path: Path) -> None:
    text = VALID + f'keys:\n  - {{tenant: alpha, hash: "{HASH}"}}\n  - {{tenant: gamma, hash: "{HASH}"}}\n'
    assert "keys[1].tenant: 'gamma' is not a tenant" in _error(_write(tmp_path, text))


def test_key_hash_must_be_sha256(tmp_path: Path) -> None:
    text = VALID + "keys:\n  - {tenant: alpha, hash: tg-plaintext-key}\n"
    assert "\n  keys.0.hash: " in _error(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "what"),
    [("- a\n- b\n", "the top level must be a mapping"), ("a: [1,\n", "not valid YAML")],
)
def test_not_a_config_document(tmp_path: Path, text: str, what: str) -> None:
    assert what in _error(_write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    assert _error(tmp_path / "absent.yaml") == f"{tmp_path / 'absent.yaml'}: file not found"


# keys_file


def test_keys_file_is_merged(tmp_path: Path) -> None:
    other = hash_key("tg-other")
    _write(
        tmp_path, f'keys:\n  - {{tenant: alpha, hash: "{other}", label: from-file}}\n', "secrets/keys.yaml"
    )
    text = VALID + f'keys_file: secrets/keys.yaml\nkeys:\n  - {{tenant: alpha, hash: "{HASH}"}}\n'
    config = load_config(_write(tmp_path, text))
    assert [(k.hash, k.label) for k in config.keys] == [(HASH, ""), (other, "from-file")]


def test_missing_keys_file_adds_no_key(tmp_path: Path) -> None:
    assert load_config(_write(tmp_path, VALID + "keys_file: keys.yaml\n")).keys == []


def test_unknown_tenant_in_keys_file_names_that_file(tmp_path: Path) -> None:
    keys = _write(tmp_path, f'keys:\n  - {{tenant: gamma, hash: "{HASH}"}}\n', "keys.yaml")
    with pytest.raises(ConfigError) as caught:
        load_config(_write(tmp_path, VALID + "keys_file: keys.yaml\n"))
    assert str(caught.value) == f"{keys.resolve()}: keys[0].tenant: 'gamma' is not a tenant"
