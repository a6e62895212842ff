"""A policy mounted from a Kubernetes ConfigMap is reloaded when the ConfigMap changes.

The kubelet writes a mounted ConfigMap the way its "atomic writer" does: the files live in a
timestamped hidden folder, `..data` is a symlink to it, and each key is a symlink
`name -> ..data/name`. An update writes a new timestamped folder and swaps `..data` with one
rename, then removes the old folder. Done here with the same steps, on the real engine."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from adapters.policy.rego import RegoEngine
from gateway.policy.decision import parse_decision
from tests.policy.conftest import SHIPPED_POLICIES, policy_config
from tests.policy.golden import input_doc

WAIT_S = 60.0  # a reload runs the policy's tests in a child process


def atomic_write(mount: Path, files: dict[str, str]) -> None:
    """Publish `files` into `mount` as the kubelet publishes a ConfigMap volume."""
    stamp = mount / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    stamp.mkdir()
    for name, text in files.items():
        (stamp / name).write_text(text)
    data = mount / "..data"
    old = data.resolve() if data.is_symlink() else None
    staging = mount / "..data_tmp"
    staging.symlink_to(stamp.name)
    staging.rename(data)  # the one atomic step
    for name in files:
        link = mount / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
    if old is not None:
        shutil.rmtree(old)


def shipped_files(models: list[str]) -> dict[str, str]:
    """The shipped policy's files, with a tenant "mounted" that may use `models`."""
    files = {path.name: path.read_text() for path in SHIPPED_POLICIES.iterdir() if path.is_file()}
    data = yaml.safe_load(files["data.yaml"])
    data["tenants"]["mounted"] = {"models": models}
    files["data.yaml"] = yaml.safe_dump(data, sort_keys=False)
    return files


@pytest.fixture
async def mounted(tmp_path: Path) -> AsyncIterator[tuple[Path, RegoEngine]]:
    mount = tmp_path / "policies"
    mount.mkdir()
    atomic_write(mount, shipped_files(["kimi-k2.6"]))
    engine = await RegoEngine.open(policy_config(dir=str(mount), reload_interval_s=0.05))
    try:
        yield mount, engine
    finally:
        await engine.aclose()


async def allowed(engine: RegoEngine) -> bool:
    result = await engine.evaluate(input_doc(tenant="mounted", model="kimi-k2.6"))
    return parse_decision(result.value).allow


async def test_a_configmap_update_is_served_without_a_restart(mounted: tuple[Path, RegoEngine]) -> None:
    mount, engine = mounted
    assert await allowed(engine)
    first = engine.revision
    atomic_write(mount, shipped_files(["kimi-k2.7-code"]))
    deadline = time.monotonic() + WAIT_S
    while engine.revision == first:
        assert time.monotonic() < deadline, "the ConfigMap update was not reloaded"
        await asyncio.sleep(0.05)
    assert not await allowed(engine)
    assert sorted(os.listdir(mount)) == sorted(["..data", *shipped_files([]).keys(), *_stamps(mount)])


def _stamps(mount: Path) -> list[str]:
    return [name for name in os.listdir(mount) if name.startswith("..2")]
