"""`tollgate`: serve, dev, sim, keys create, config check, audit verify, policy test/eval."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import orjson

from gateway.config import (
    CONFIG_ENV,
    DEFAULT_CONFIG_PATH,
    METRICS_DIR_ENV,
    SIM_PORT_ENV,
    ConfigError,
    GatewayConfig,
    StateConfig,
    load_config,
    metrics_dir_from_env,
)
from gateway.jobs.worker import run_jobs_worker
from gateway.keys import generate_key, hash_key
from gateway.keys_file import append_key, entry_line, key_entry
from gateway.routing_config import PRIORITIES
from gateway.sessions import commands as session_commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tollgate", description="A policy-enforcing LLM gateway.")
    commands = parser.add_subparsers(dest="command", required=True)

    _add_run_commands(commands)
    commands.add_parser("sim", help="run the upstream simulator (see `tollgate sim --help`)", add_help=False)

    keys = commands.add_parser("keys", help="manage API keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser("create", help="mint a key; prints it once, with the hash to store")
    create.add_argument("--tenant", required=True)
    create.add_argument("--label", default="")
    create.add_argument("--config", help="check the tenant exists in this config file")
    create.add_argument("--append", metavar="KEYS_FILE", help="append the hash entry to this keys file")
    _add_live_key_commands(key_commands, create)

    config = commands.add_parser("config", help="configuration tools")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    check = config_commands.add_parser("check", help="validate a config file")
    check.add_argument("file")

    audit = commands.add_parser("audit", help="decision log tools")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    verify = audit_commands.add_parser("verify", help="check the decision log's hash chain (1 if broken)")
    verify.add_argument("--path", help="a JSONL decision log")
    verify.add_argument("--redis", metavar="URL", help="a Redis server holding the log as a stream")
    verify.add_argument("--stream", default="tollgate:audit", help="the stream key (with --redis)")
    _add_policy_commands(commands)

    _add_spend_command(commands)
    session_commands.add_commands(commands)
    _add_compare_command(commands)

    args, rest = parser.parse_known_args(argv)
    if args.command == "sim":
        from simulator import main as sim_main

        return sim_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "serve":
            if args.first_key:
                _ensure_first_key(args.config, load_config(args.config), label="first")
            return _unwinding_on_sigterm(lambda: _serve(args.config, args.host, args.port, args.workers))
        if args.command == "jobs-worker":
            return run_jobs_worker(args.config, args.nice, args.idle)
        if args.command == "dev":
            return _unwinding_on_sigterm(
                lambda: _dev(args.config, args.host, args.port, args.sim_port, args.sim_profile)
            )
        if args.command == "keys":
            if args.keys_command != "create" or args.store:
                return _live_keys(args)
            return _keys_create(args.tenant, args.label, args.config, args.append)
        if args.command == "audit":
            if (args.path is None) == (args.redis is None):
                parser.error("audit verify needs either --path FILE or --redis URL")
            return _audit_verify(args.path, args.redis, args.stream)
        if args.command == "policy":
            return _policy(args)
        if args.command == "sessions":
            return _sessions(args)
        if args.command == "compare":
            return _compare(args)
        if args.command == "spend":
            return _spend(args.config, args.tenant, args.since, args.until, args.json, args.by)
        return _config_check(args.file)
    except ConfigError as exc:
        print(f"tollgate: {exc}", file=sys.stderr)
        return 2


class _Terminated(Exception):
    """SIGTERM, raised where the process was when it arrived."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def _unwinding_on_sigterm(run: Callable[[], int]) -> int:
    """Run a server so that SIGTERM unwinds it, then ends the process by that signal.

    A single worker serving in this process raises the SIGTERM that stopped it again once it has
    shut down (uvicorn does). By default that ends the process on the spot, past every `finally`:
    `tollgate dev` would leave its simulator to stop on its own after it has gone (the port still
    taken for a moment) and the workers' metrics directory would stay behind. Here the signal
    unwinds the stack first, and the exit status is still the signal's. (With many workers the
    supervisor handles SIGTERM itself and returns.)"""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return run()
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        # Still here: the process is a container's init (PID 1), whose signals' default
        # actions the kernel does not take. A clean shutdown, as before.
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _add_run_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="run the gateway")
    _config_arg(serve)
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int)
    serve.add_argument(
        "--first-key",
        action="store_true",
        help="with no key configured, mint one into keys_file and print it once (a container's first start)",
    )

    jobs_worker = commands.add_parser(
        "jobs-worker", help="run async jobs only, serving no HTTP (docs/async.md)"
    )
    _config_arg(jobs_worker)
    jobs_worker.add_argument("--nice", type=int, default=10, help="OS priority increment (default 10)")
    jobs_worker.add_argument(
        "--idle",
        action="store_true",
        help="the lowest CPU priority: Linux's SCHED_IDLE (runs only on an otherwise idle CPU)",
    )

    dev = commands.add_parser("dev", help="run the gateway and a local upstream simulator")
    _config_arg(dev)
    dev.add_argument("--host", help="the gateway's address (default: server.host)")
    dev.add_argument("--port", type=int, help="the gateway's port (default: server.port)")
    dev.add_argument(
        "--sim-port",
        type=int,
        default=8081,
        help="the simulator's port; the config reaches it as ${TOLLGATE_SIM_PORT}",
    )
    dev.add_argument(
        "--sim-profile",
        default="kimi",
        help="the simulator's server profile (kimi, generic, vllm, sglang, llama-server, llama-cpp-python)",
    )


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", default=os.environ.get(CONFIG_ENV, DEFAULT_CONFIG_PATH), help="config file (YAML)"
    )


def _config_check(path: str) -> int:
    config = load_config(path)
    print(
        f"{path}: ok ({len(config.upstreams)} upstreams, {len(config.models)} model aliases, "
        f"{len(config.tenants)} tenants, {len(config.keys)} keys)"
    )
    return 0


def _keys_create(tenant: str, label: str, config_path: str | None, append: str | None) -> int:
    if config_path:
        config = load_config(config_path)
        if tenant not in config.tenants:
            raise ConfigError(f"{config_path}: tenant {tenant!r} is not defined under tenants")
    key = generate_key()
    entry = key_entry(tenant, hash_key(key), label)
    if append:
        appended = append_key(Path(append), entry)  # before the key is shown: a refusal shows none
        print(key)
        print(f"The key above is shown once. Its hash was added to {append}.", file=sys.stderr)
        if appended.rewritten:
            print(f"{append} was rewritten from its parsed content; its comments are gone.", file=sys.stderr)
    else:
        print(key)
        print("The key above is shown once. Store this entry under `keys:`:", file=sys.stderr)
        print(entry_line(entry), file=sys.stderr)
    return 0


def _add_live_key_commands(
    key_commands: argparse._SubParsersAction[argparse.ArgumentParser], create: argparse.ArgumentParser
) -> None:
    create.add_argument(
        "--store", action="store_true", help="store it as a live key in the config's state store"
    )
    create.add_argument(
        "--labels",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --store, repeatable: e.g. team=search",
    )
    create.add_argument("--expires-in", metavar="DURATION", help="with --store: e.g. 90s, 15m, 12h, 30d")
    create.add_argument("--workflow", help="with --store: the workflow of requests that send no x-workflow")
    create.add_argument(
        "--priority",
        choices=PRIORITIES,
        help="with --store: of its requests that send no x-priority (else normal)",
    )
    create.add_argument(
        "--budget",
        action="append",
        default=[],
        help="with --store, repeatable: e.g. day:usd=5, month:tokens=2000000:soft",
    )
    create.add_argument("--rpm", type=int, help="with --store: requests per minute for this key")
    create.add_argument("--tpm", type=int, help="with --store: tokens per minute for this key")
    listing = key_commands.add_parser(
        "list", help="the live keys in the state store (never the keys themselves)"
    )
    listing.add_argument("--tenant")
    listing.add_argument("--json", action="store_true")
    revoke = key_commands.add_parser(
        "revoke", help="revoke a live key; every gateway refuses it within a second"
    )
    revoke.add_argument("key_id")
    rotate = key_commands.add_parser(
        "rotate", help="a new live key in place of one; the old works for --overlap"
    )
    rotate.add_argument("key_id")
    rotate.add_argument("--overlap", default="1h", help="how long the old key keeps working (default 1h)")
    rotate.add_argument("--expires-in", metavar="DURATION", help="the new key's lifetime (default: none)")
    for sub in (listing, revoke, rotate):
        _config_arg(sub)


def _live_keys(args: argparse.Namespace) -> int:
    import asyncio

    from adapters.state import build_key_store
    from gateway.app import audit_sink_from
    from gateway.keystore import commands
    from gateway.keystore.operations import KeyOperations
    from gateway.metering.parts import state_config

    config_path = args.config or os.environ.get(CONFIG_ENV, DEFAULT_CONFIG_PATH)
    config = load_config(config_path)
    if config.live_keys is None:
        raise ConfigError(
            f"{config_path}: no `live_keys:` block, so no gateway with this config serves keys from the "
            "state store; add `live_keys: {}` (or use `keys create --append KEYS_FILE`)"
        )
    store = build_key_store(state_config(config) or StateConfig())

    async def run() -> int:
        audit = audit_sink_from(config)
        operations = KeyOperations(store, lambda: config.tenants, config.workflow_names, audit)
        try:
            if args.keys_command == "create":
                return await commands.run(
                    lambda: commands.create(
                        operations,
                        args.tenant,
                        args.label,
                        args.labels,
                        args.expires_in,
                        args.workflow,
                        args.priority,
                        args.budget,
                        args.rpm,
                        args.tpm,
                    )
                )
            if args.keys_command == "list":
                return await commands.run(lambda: commands.listing(operations, args.tenant, args.json))
            if args.keys_command == "revoke":
                return await commands.run(lambda: commands.revoke(operations, args.key_id))
            return await commands.run(
                lambda: commands.rotate(operations, args.key_id, args.overlap, args.expires_in)
            )
        finally:
            if audit is not None:
                await audit.aclose()  # writes what is queued: the change's record
            await store.aclose()

    return asyncio.run(run())


def _add_spend_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spend = commands.add_parser("spend", help="the spend ledger: per tenant, key, model, workflow and day")
    _config_arg(spend)
    spend.add_argument("--tenant", action="append", help="repeatable; default: every tenant")
    spend.add_argument("--since", help="YYYY-MM-DD (UTC); default: the first of this month")
    spend.add_argument("--until", help="YYYY-MM-DD (UTC); default: today")
    spend.add_argument("--json", action="store_true", help="print JSON, as GET /admin/spend does")
    spend.add_argument(
        "--by",
        choices=("workflow", "model", "key", "tenant", "day"),
        help="one line per workflow, model, key, tenant or day (their sums); default: every ledger row",
    )


def _spend(
    config_path: str,
    tenants: list[str] | None,
    since: str | None,
    until: str | None,
    as_json: bool,
    by: str | None = None,
) -> int:
    import asyncio
    from datetime import UTC, datetime

    from adapters.state import build_state_store
    from gateway.errors import StateStoreUnavailable
    from gateway.metering.parts import state_config
    from gateway.metering.records import SpendRow
    from gateway.metering.report import default_range, parse_day, spend_document, spend_table

    config = load_config(config_path)
    names = tuple(tenants or config.tenants)
    first, last = default_range(datetime.now(UTC).date())
    try:
        first = parse_day(since, "--since") if since else first
        last = parse_day(until, "--until") if until else last
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    store = build_state_store(_existing_state(state_config(config) or StateConfig()))

    async def query() -> list[SpendRow]:
        try:
            return await store.spend(names, first, last)
        finally:
            await store.aclose()

    try:
        rows = asyncio.run(query())
    except StateStoreUnavailable as exc:
        print(f"tollgate: {exc.failure}", file=sys.stderr)
        return 1
    print(orjson.dumps(spend_document(rows, first, last, by)).decode() if as_json else spend_table(rows, by))
    return 0


def _add_compare_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compare = commands.add_parser(
        "compare", help="the arms of an alias run side by side (split, mirror), from the decision log"
    )
    _config_arg(compare)
    compare.add_argument("--alias", required=True, help="the model alias")
    compare.add_argument(
        "--since", default="24h", help="24h, 30m, 7d, YYYY-MM-DD or an ISO time (default 24h)"
    )
    compare.add_argument("--path", help="a JSONL decision log (default: audit.path of the config)")
    compare.add_argument("--redis", metavar="URL", help="a Redis server holding the log as a stream")
    compare.add_argument("--stream", default="tollgate:audit", help="the stream key (with --redis)")
    compare.add_argument("--json", action="store_true", help="print JSON")


def _compare(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from gateway.routing.compare import compare, compare_table, parse_since

    try:
        since = parse_since(args.since, datetime.now(UTC))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    path, redis_url, stream = args.path, args.redis, args.stream
    if path is None and redis_url is None:
        audit = load_config(args.config).audit
        if audit is None:
            raise ConfigError(f"{args.config}: no audit block: name the decision log with --path or --redis")
        path, redis_url, stream = (
            (audit.path, None, stream) if audit.sink == "jsonl" else (None, audit.redis_url, audit.stream)
        )
    if path is not None:
        from adapters.audit.jsonl import read_lines

        try:
            summaries = compare(read_lines(Path(path)), args.alias, since)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    else:
        import asyncio

        from adapters.audit.redis_stream import read_stream

        try:
            summaries = compare(asyncio.run(read_stream(redis_url, stream)), args.alias, since)
        except Exception as exc:  # redis' own errors: connection, auth, wrong key type
            raise ConfigError(f"{redis_url} stream {stream}: cannot read ({exc})") from None
    if args.json:
        print(orjson.dumps({"alias": args.alias, "since": since, "arms": summaries}).decode())
    elif not summaries:
        print(f"no side-by-side records of {args.alias!r} since {args.since}")
    else:
        print(compare_table(summaries))
    return 0


def _sessions(args: argparse.Namespace) -> int:
    from adapters.state import build_state_store

    config = load_config(args.config)
    named = [args.tenant] if args.sessions_command == "show" else args.tenant or []
    for tenant in named:
        if tenant not in config.tenants:
            raise ConfigError(f"{args.config}: no tenant {tenant!r}")
    state = _existing_state(session_commands.state_of(config))
    return session_commands.run(args, config, build_state_store(state))


def _existing_state(state: StateConfig) -> StateConfig:
    """`state`, for a command that only reads it: an embedded SQLite file that is not there
    is an error (opening it would create an empty one, and the command would answer from it)."""
    if state.store == "sqlite" and not Path(state.sqlite_path).exists():
        raise ConfigError(
            f"no state database at {Path(state.sqlite_path).resolve()}: state.sqlite_path is relative to "
            "the working directory; run this where the gateway runs, or make the path absolute"
        )
    return state


def _audit_verify(path: str | None, redis_url: str | None, stream: str) -> int:
    if path is not None:
        from adapters.audit.jsonl import verify_file

        where = path
        try:
            report = verify_file(path)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    else:
        import asyncio

        from adapters.audit.redis_stream import verify_stream

        assert redis_url is not None
        where = f"{redis_url} stream {stream}"
        try:
            report = asyncio.run(verify_stream(redis_url, stream))
        except Exception as exc:  # redis' own errors: connection, auth, wrong key type
            raise ConfigError(f"{where}: cannot read ({exc})") from None
    if report.problem is not None:
        print(f"{where}: BROKEN at {report.problem}", file=sys.stderr)
        print(f"Intact records before it: {report.records}.", file=sys.stderr)
        return 1
    print(f"{where}: ok ({report.records} records, head hash {report.head_hash})")
    return 0


def _add_policy_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    policy = commands.add_parser("policy", help="policy tools (the embedded Rego engine)")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    test = policy_commands.add_parser("test", help="run the *_test.rego tests (1 if any fails)")
    test.add_argument(
        "--engine",
        choices=["rego", "opa"],
        default="rego",
        help="rego: the embedded engine; opa: OPA's own (needs opa-golib-python-bindings)",
    )
    evaluate = policy_commands.add_parser("eval", help="print the decision for an input document, and why")
    evaluate.add_argument("--input", required=True, metavar="FILE", help="the input document (JSON)")
    evaluate.add_argument(
        "--entrypoint", help="default: policy.entrypoint of the config, or gateway/authz/decision"
    )
    for sub in (test, evaluate):
        sub.add_argument(
            "--dir", help="the policy directory (default: policy.dir of the config, or ./policies)"
        )
        _config_arg(sub)


def _policy(args: argparse.Namespace) -> int:
    from adapters.policy.commands import policy_eval, policy_test

    directory, entrypoint = args.dir, "gateway/authz/decision"
    if Path(args.config).exists():
        configured = load_config(args.config).policy
        if configured is not None:
            directory = directory or configured.dir
            entrypoint = configured.entrypoint
    directory = directory or "policies"
    if args.policy_command == "test":
        return policy_test(directory, args.engine)
    return policy_eval(directory, args.entrypoint or entrypoint, args.input)


def _check_policy(config: GatewayConfig) -> None:
    """Refuse to start on a policy the workers would refuse, with the reason, before any starts."""
    if config.policy is None or config.policy.engine != "rego":
        return
    import asyncio

    from adapters.policy.check_cache import CheckCache, check_with_cache
    from adapters.policy.reload import publish_checked
    from adapters.policy.shared_revisions import SharedRevisions
    from adapters.policy.source import PolicyLoadError, read_policy_dir

    try:
        source = read_policy_dir(config.policy.dir)
    except PolicyLoadError as exc:
        raise ConfigError(f"policy: {exc}") from None
    cache = CheckCache.for_config(config.policy)
    report = asyncio.run(check_with_cache(source, config.policy.entrypoint, cache))
    if not report.ok:
        raise ConfigError(f"policy: {config.policy.dir}: the policy is refused: {report.error}")
    # Checked once here: the workers load what is announced rather than each compile it.
    try:
        publish_checked(SharedRevisions.for_config(config.policy), source, report, config.policy.entrypoint)
    except PolicyLoadError as exc:
        raise ConfigError(f"policy: {exc}") from None


def _serve(config_path: str, host: str | None, port: int | None, workers: int | None) -> int:
    config = load_config(config_path)  # fail here, with a clear message, before any worker starts
    _check_policy(config)
    os.environ[CONFIG_ENV] = str(Path(config_path).resolve())
    metrics_dir, made = _fresh_metrics_dir()
    os.environ[METRICS_DIR_ENV] = str(metrics_dir)
    try:
        _run_workers(config, host, port, workers)
    finally:
        if made:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


def _fresh_metrics_dir() -> tuple[Path, bool]:
    """Where this server's workers share their metrics (telemetry/worker_snapshots.py), emptied
    of an earlier run's files; (directory, whether it was made here and is to be removed)."""
    given = metrics_dir_from_env()
    if given is None:
        return Path(tempfile.mkdtemp(prefix="tollgate-metrics-")), True
    given.mkdir(parents=True, exist_ok=True)
    for stale in given.glob("*.json"):
        stale.unlink(missing_ok=True)
    return given, False


def _run_workers(config: GatewayConfig, host: str | None, port: int | None, workers: int | None) -> None:
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    from gateway.http_protocol import HTTP_PROTOCOL, KEEP_ALIVE_S
    from gateway.supervisor import Supervisor
    from gateway.worker_server import WorkerServer

    server = config.server
    count = workers or server.workers
    uvicorn_config = uvicorn.Config(
        "gateway.serve:app_factory",
        factory=True,
        host=host or server.host,
        port=port if port is not None else server.port,
        workers=count,
        loop="uvloop" if _has_uvloop() else "asyncio",
        http=HTTP_PROTOCOL,
        lifespan="on",
        access_log=False,
        server_header=False,
        proxy_headers=False,  # X-Forwarded-*: the gateway reads neither client address nor scheme
        log_config=None,
        backlog=4096,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=30,
    )
    if count > 1:
        code = Supervisor(uvicorn_config, count, server.drain_s).run()
    else:
        single = WorkerServer(uvicorn_config, server.drain_s)
        # uvicorn raises the signal that stopped it again once it is done: SIGINT's is a
        # KeyboardInterrupt here, after a clean shutdown.
        with contextlib.suppress(KeyboardInterrupt):
            single.run()
        code = 0 if single.started else STARTUP_FAILURE
    if code:
        raise SystemExit(code)


def _dev(config_path: str, host: str | None, port: int | None, sim_port: int, sim_profile: str) -> int:
    os.environ[SIM_PORT_ENV] = str(sim_port)  # before the config is read: its upstream is the simulator
    config = load_config(config_path)
    _ensure_first_key(config_path, config, label="dev")
    from gateway.worker_server import exit_with_master

    dev_pid = os.getpid()
    # The simulator stops with `tollgate dev` however that ends, even by SIGKILL (its parent-death
    # signal). No thread runs yet (the announcer starts after), so a preexec_fn is safe.
    sim = subprocess.Popen(
        [sys.executable, "-m", "simulator", "--port", str(sim_port), "--profile", sim_profile],
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: exit_with_master(dev_pid),  # noqa: PLW1509
    )
    try:
        _wait_healthy(f"http://127.0.0.1:{sim_port}/health", sim)
        address = f"{host or config.server.host}:{port if port is not None else config.server.port}"
        announce = threading.Thread(
            target=_announce_when_ready,
            args=(address, f"upstream: the simulator on port {sim_port}, profile {sim_profile}"),
            daemon=True,
        )
        announce.start()
        return _serve(config_path, host, port, None)
    finally:
        sim.terminate()
        try:
            sim.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait()


def _announce_when_ready(address: str, upstream: str, seconds: float = 600.0) -> None:
    """One line, printed (not logged: the log scrubber would mask the address) once the gateway
    answers /readyz, so what it says is true when it is read."""
    probe = address.replace("0.0.0.0", "127.0.0.1")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{probe}/readyz", timeout=1) as response:
                if response.status == 200:
                    print(
                        f"\nTollgate is ready: http://{address}/v1  ({upstream}; Ctrl-C stops both)\n",
                        file=sys.stderr,
                    )
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)


def _ensure_first_key(config_path: str, config: GatewayConfig, label: str) -> None:
    """With no key anywhere, mint one for the first tenant into the keys file and show it once."""
    if config.keys or not config.keys_file:
        return
    tenant = next(iter(config.tenants))
    keys_file = Path(config_path).parent / config.keys_file
    key = generate_key()
    append_key(keys_file, key_entry(tenant, hash_key(key), label))
    print(
        f"\nCreated an API key for tenant {tenant!r} (shown once; only its hash is kept in {keys_file}):\n\n"
        f"    {key}\n",
        file=sys.stderr,
    )


def _wait_healthy(url: str, process: subprocess.Popen[bytes], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ConfigError(f"the simulator exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 (a loopback URL we built)
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise ConfigError(f"the simulator did not become healthy at {url}")


def _has_uvloop() -> bool:
    import importlib.util

    return importlib.util.find_spec("uvloop") is not None


if __name__ == "__main__":
    raise SystemExit(main())
