"""What a policy decision costs, in process and through the gateway, on 100 tenants.

    python -m bench.policy [--quick] [--no-gateway] [--no-doc]

- decisions: the decide stage called directly (input document, cache, engine, parse, the
  max_tokens cap; no decision log), on 100 tenants x 4 request shapes: from the cache; not
  cached on the embedded engine (regopy), one at a time and 64 at once over 2 threads; not
  cached over OPA's REST API (the OPA-protocol test server, tests/policy/opa_server.py, in
  its own process, evaluating with the same compiled bundles: it is regopy behind aiohttp,
  so its figure is the client's plus that server's, not a real OPA's).
- OPA client: the gateway's client (adapters/policy/opa.py, on the gateway's aiohttp client)
  against opa-python-client's AsyncOpaClient, on the same server, one request at a time.
- gateway: wrk at c64 with 100 keys of 100 tenants in turn, against a gateway (2 workers,
  access log on) in front of nginx, without a policy (the spine) and with the default
  embedded engine and its cache; rounds alternate, medians.

Results go to bench/results/policy-*.json and the "Policy" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from adapters.policy.compiled import compile_revision
from adapters.policy.opa import OpaEngine
from adapters.policy.rego import RegoEngine
from adapters.policy.source import read_policy_dir
from bench import harness as spine
from gateway.config import PolicyConfig
from gateway.exchange import Endpoint, Exchange, Principal, Tenant
from gateway.keys import generate_key, hash_key
from gateway.policy.cache import DecisionCache
from gateway.ports import PolicyEngine
from gateway.stages.decide import Decide

ROOT = Path(__file__).resolve().parent.parent
TENANTS = 100
ENTRYPOINT = "gateway/authz/decision"
TARGET_CACHED_US = 50.0
TARGET_LOSS_PCT = 15.0
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("search", "fetch_url")]


def tenant_names() -> list[str]:
    return [f"t{i:03d}" for i in range(TENANTS)]


def write_policy_dir(target: Path) -> Path:
    """The shipped policy with 100 tenants added to its data."""
    shutil.copytree(ROOT / "policies", target)
    data_file = target / "data.yaml"
    data = yaml.safe_load(data_file.read_text())
    for name in tenant_names():
        data["tenants"][name] = {
            "models": [spine.MODEL_ALIAS],
            "tools": ["search", "fetch_url"],
            "on_tool_violation": "strip",
            "tool_args": {"fetch_url": {"url": {"allowed_hosts": ["*.example.com", "10.0.0.1"]}}},
        }
    data_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def exchanges() -> list[Exchange]:
    """100 tenants x 4 shapes (plain, streamed, with tools, a longer conversation)."""
    shapes: list[tuple[dict[str, Any], bool]] = [
        ({}, False),
        ({"stream": True}, True),
        ({"tools": TOOLS, "tool_choice": "auto"}, False),
        (
            {"messages": [{"role": "system", "content": "s"}, *[{"role": "user", "content": "q" * 400}] * 5]},
            False,
        ),
    ]
    found = []
    for name in tenant_names():
        principal = Principal(Tenant(name), f"k-{name}", "bench")
        for extra, stream in shapes:
            body = {"model": spine.MODEL_ALIAS, "messages": [{"role": "user", "content": "hello"}], **extra}
            found.append(
                Exchange(
                    request_id=f"bench-{name}",
                    endpoint=Endpoint.CHAT,
                    received_at=0.0,
                    deadline=1e9,
                    headers={},
                    raw_body=b"",
                    body=body,
                    principal=principal,
                    model_alias=spine.MODEL_ALIAS,
                    stream=stream,
                )
            )
    return found


def stage(engine: PolicyEngine, cached: bool) -> Decide:
    return Decide(
        engine,
        {spine.MODEL_ALIAS: ["fast"]},
        cache=DecisionCache(10_000) if cached else None,
        audit=None,
        timeout_s=5.0,
    )


async def sequential(decide: Decide, items: list[Exchange], n: int) -> dict[str, float]:
    samples = []
    cpu0 = time.process_time()
    for i in range(n):
        exchange = items[i % len(items)]
        t0 = time.perf_counter()
        await decide(exchange)
        samples.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    assert all(e.decision is not None and e.decision.allow for e in items[: min(n, len(items))])
    return {
        "p50_us": statistics.median(samples) * 1e6,
        "p99_us": spine.percentile(samples, 99) * 1e6,
        "mean_us": statistics.fmean(samples) * 1e6,
        "cpu_us": cpu / n * 1e6,
    }


async def concurrent(decide: Decide, items: list[Exchange], n: int, width: int = 64) -> dict[str, float]:
    async def worker(offset: int) -> None:
        for i in range(offset, n, width):
            await decide(items[i % len(items)])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(width)))
    elapsed = time.perf_counter() - t0
    return {"per_second": n / elapsed, "wall_us_per_decision": elapsed / n * 1e6}


async def decision_figures(directory: Path, n_cached: int, n_uncached: int) -> dict[str, Any]:
    items = exchanges()
    config = PolicyConfig(dir=str(directory), eval_threads=2)
    engine = RegoEngine(compile_revision(read_policy_dir(directory), ENTRYPOINT), config)
    out: dict[str, Any] = {}
    try:
        cached = stage(engine, cached=True)
        for exchange in items:  # fill the cache
            await cached(exchange)
        out["cached"] = await sequential(cached, items, n_cached)
        out["cache_entries"] = len(items)
        out["rego_uncached"] = await sequential(stage(engine, cached=False), items, n_uncached)
        out["rego_uncached_64"] = await concurrent(stage(engine, cached=False), items, n_uncached * 2)
    finally:
        await engine.aclose()
    with start_opa_server(directory) as url:  # started once, before the measurement
        opa = OpaEngine(PolicyConfig(dir=str(directory), engine="opa", opa={"url": url, "timeout_ms": 2000}))
        try:
            out["opa_uncached"] = await sequential(stage(opa, cached=False), items, n_uncached)
            out["opa_client"] = await client_figures(opa, url, n_uncached)
        finally:
            await opa.aclose()
    return out


@contextlib.contextmanager
def start_opa_server(directory: Path) -> Iterator[str]:
    """The OPA-protocol test server on `directory`'s policy (evaluated with the gateway's
    compiled bundles), in a process of its own; its URL, the server stopped when done."""
    port = spine.free_port()
    argv = [sys.executable, "-m", "tests.policy.opa_server", str(directory), str(port), "--compiled"]
    server = subprocess.Popen(argv, cwd=ROOT)
    try:
        url = f"http://{spine.HOST}:{port}"
        _wait_port(url + "/health", server)
        yield url
    finally:
        server.terminate()
        server.wait(10)


async def client_figures(ours: OpaEngine, url: str, n: int) -> dict[str, Any]:
    doc = {"tenant": "t000", "model": spine.MODEL_ALIAS, "upstreams": ["fast"], "tools": ["search"]}
    figures: dict[str, Any] = {"gateway_client": await _timed(lambda: ours.evaluate(doc), n)}
    try:
        from opa_client.opa_async import AsyncOpaClient
    except ImportError:
        figures["opa_python_client"] = None
        return figures
    host, port = url.removeprefix("http://").split(":")
    async with AsyncOpaClient(host=host, port=int(port), retries=0, timeout=2.0) as client:
        figures["opa_python_client"] = await _timed(
            lambda: client.query_rule(input_data=doc, package_path="gateway.authz", rule_name="decision"), n
        )
    return figures


async def _timed(call: Any, n: int) -> dict[str, float]:
    for _ in range(20):
        await call()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - t0)
    return {"p50_us": statistics.median(samples) * 1e6, "p99_us": spine.percentile(samples, 99) * 1e6}


def _wait_port(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise spine.BenchError("the OPA-protocol server exited")
        try:
            status, _ = spine.http("GET", url, timeout=1.0)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise spine.BenchError("the OPA-protocol server did not start")


# --------------------------------------------------------------------------- the gateway

WRK_KEYS_SCRIPT = """\
local keys = {{{keys}}}
local body = [[{body}]]
local counter = 0
request = function()
  counter = counter + 1
  local headers = {{}}
  headers["Content-Type"] = "application/json"
  headers["Authorization"] = "Bearer " .. keys[(counter % #keys) + 1]
  return wrk.format("POST", nil, headers, body)
end
"""


def gateway_config(
    stack: spine.Stack, port: int, keys: dict[str, str], policy: Path | None
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "server": {"host": spine.HOST, "port": port, "workers": 2, "access_log": True},
        "upstreams": {
            "fast": {"kind": "openai_compat", "base_url": f"http://{spine.HOST}:{stack.fast_port}/v1"}
        },
        "models": {spine.MODEL_ALIAS: [{"upstream": "fast", "model": "bench-upstream-model"}]},
        "tenants": {name: {"models": ["*"]} for name in keys},
        "keys": [{"tenant": name, "hash": hash_key(key)} for name, key in keys.items()],
    }
    if policy is not None:
        config["policy"] = {"dir": str(policy)}
    return config


def start_gateway(stack: spine.Stack, name: str, keys: dict[str, str], policy: Path | None) -> None:
    spine.serve_gateway(stack, name, lambda port: gateway_config(stack, port, keys, policy))
    headers = {"content-type": "application/json", "authorization": f"Bearer {next(iter(keys.values()))}"}
    status, body = spine.http("POST", stack.gateway_url, spine.CHAT_BODY.encode(), headers, timeout=5)
    if status != 200:
        raise spine.BenchError(f"{name}: the gateway answered {status}: {body[:300]!r}")


def gateway_figures(directory: Path, rounds: int, seconds: float) -> dict[str, Any]:
    procs = spine.Processes()
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-policy-"))
    keys = {name: generate_key() for name in tenant_names()}
    variants: dict[str, Path | None] = {"spine": None, "policy": directory}
    try:
        stack = spine.start_stack(procs, tmp, "auto", 1)
        script = tmp / "keys.lua"
        lua_keys = ", ".join(f'"{k}"' for k in keys.values())
        done = spine.WRK_SCRIPT.format(body="", key="")
        script.write_text(
            WRK_KEYS_SCRIPT.format(keys=lua_keys, body=spine.CHAT_BODY)
            + done[done.index("done = function") :]
        )
        starts = {
            name: functools.partial(start_gateway, stack, name, keys, dir_) for name, dir_ in variants.items()
        }
        return spine.alternating_gateways(stack, starts, script, rounds, seconds)
    finally:
        procs.stop_all()


# --------------------------------------------------------------------------- report


def section(meta: dict[str, Any], d: dict[str, Any], g: dict[str, Any] | None) -> str:
    c, r, r64, o = d["cached"], d["rego_uncached"], d["rego_uncached_64"], d["opa_uncached"]
    clients = d["opa_client"]
    lines = [
        "## Policy",
        "",
        f"- Command: `python -m bench.policy{meta['args']}` · {meta['date']} · git {meta['git']}",
        f"- Machine: {os.cpu_count()}-core VM shared with other work; medians.",
        f"- The decide stage called directly on {TENANTS} tenants x 4 request shapes (the shipped",
        "  policy, its data extended with the tenants): input document, cache, engine, parse and",
        "  the max_tokens cap; no decision log (its cost is the audit sink's).",
        "",
        "| figure | p50 | p99 | CPU per decision | target | met |",
        "|---|---|---|---|---|---|",
        f"| cached decision | {c['p50_us']:.1f} µs | {c['p99_us']:.1f} µs | {c['cpu_us']:.1f} µs "
        f"| <= {TARGET_CACHED_US:.0f} µs | {spine.met(c['p50_us'] <= TARGET_CACHED_US)} |",
        f"| not cached, embedded engine (regopy) | {r['p50_us']:,.0f} µs | {r['p99_us']:,.0f} µs "
        f"| {r['cpu_us']:,.0f} µs | reported | |",
        f"| not cached, embedded, 64 at once on 2 threads | {r64['wall_us_per_decision']:,.0f} µs "
        f"of wall each | | | {r64['per_second']:,.0f} decisions/s | |",
        f"| not cached, OPA REST API (test server: regopy behind aiohttp) | {o['p50_us']:,.0f} µs "
        f"| {o['p99_us']:,.0f} µs | {o['cpu_us']:,.0f} µs (client side) | reported | |",
    ]
    ours, theirs = clients["gateway_client"], clients.get("opa_python_client")
    lines += [
        "",
        "OPA client, one request at a time against the same server (input of 4 fields):",
        "",
        "| client | p50 | p99 |",
        "|---|---|---|",
        f"| the gateway's (adapters/policy/opa.py on its aiohttp client) | {ours['p50_us']:,.0f} µs "
        f"| {ours['p99_us']:,.0f} µs |",
    ]
    if theirs is not None:
        lines.append(
            f"| opa-python-client 3 AsyncOpaClient (retries 0) | {theirs['p50_us']:,.0f} µs "
            f"| {theirs['p99_us']:,.0f} µs |"
        )
    if g is not None:
        rps, cpu = g["rps"], g["cpu_ms_per_request"]
        loss = 100 * (1 - rps["policy"] / rps["spine"])
        lines += [
            "",
            f"Through the gateway (2 workers, access log on, upstream {g['upstream']}), wrk c64, "
            f"{TENANTS} keys of {TENANTS} tenants in turn:",
            "",
            "| gateway | RPS at c64 | gateway CPU per request | loss against the spine | target | met |",
            "|---|---|---|---|---|---|",
            f"| the spine (no policy block) | {rps['spine']:,.0f} | {cpu['spine']:.3f} ms | | | |",
            f"| policy: embedded engine, cache on | {rps['policy']:,.0f} | {cpu['policy']:.3f} ms "
            f"| {loss:.1f} % | <= {TARGET_LOSS_PCT:.0f} % | {spine.met(loss <= TARGET_LOSS_PCT)} |",
            "",
            "The gateway CPU added per request is more than the cached decision alone: it also pays",
            "for what a decision switches on downstream (tool guards, redaction checks, governance",
            "metrics) and for one uncached evaluation per tenant and request shape in each worker.",
            "On this shared machine the RPS loss moves by several points from run to run; read it",
            "with the CPU figures.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.policy")
    parser.add_argument("--quick", action="store_true", help="fewer decisions, 1 round of 5 s")
    parser.add_argument("--no-gateway", action="store_true", help="in-process figures only")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    directory = write_policy_dir(Path(tempfile.mkdtemp(prefix="tollgate-bench-policies-")) / "policies")
    decisions = asyncio.run(
        decision_figures(directory, 5_000 if args.quick else 40_000, 300 if args.quick else 2000)
    )
    gateway = (
        None
        if args.no_gateway
        else gateway_figures(directory, 1 if args.quick else 3, 5 if args.quick else 10)
    )
    meta = spine.run_meta(argv)
    spine.save_results("policy", {"meta": meta, "decisions": decisions, "gateway": gateway})
    markdown = section(meta, decisions, gateway)
    print(markdown)
    if not args.no_doc:
        spine.update_doc("policy", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
