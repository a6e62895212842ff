"""What every benchmark shares: the processes it starts (nginx, the simulator, gateways, the
floor proxy), wrk and what a load run costs, the streaming TTFB client, and where results go
(bench/results/*.json, a section of docs/benchmarks.md).

Everything runs on 127.0.0.1. A load run records the CPU spent by the serving processes, by
the whole machine and by processes that are not ours, so that runs disturbed by other work
can be left out and ratios can be read against a baseline measured in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"

HOST = "127.0.0.1"
CHAT_PATH = "/v1/chat/completions"
MODEL_ALIAS = "bench-model"  # routed to the fast upstream
STREAM_ALIAS = "bench-stream"  # routed to the simulator

# ~200 bytes: what wrk posts, to the upstream directly and through the gateway.
CHAT_BODY = json.dumps(
    {
        "model": MODEL_ALIAS,
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Say hello to the overhead benchmark in one short sentence, please."},
        ],
        "max_tokens": 16,
        "temperature": 0,
    },
    separators=(",", ":"),
)
# ~300 bytes: what nginx answers to every POST /v1/chat/completions.
UPSTREAM_REPLY = json.dumps(
    {
        "id": "chatcmpl-bench000000000001",
        "object": "chat.completion",
        "created": 1763780000,
        "model": "bench-upstream-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello, benchmark! A fixed reply."},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 24, "completion_tokens": 9, "total_tokens": 33},
    },
    separators=(",", ":"),
)

WAIT_HEALTHY_S = 30.0
STOP_GRACE_S = 15.0
WRK_SLACK_S = 30.0
WARMUP_S = 3.0  # wrk load on a freshly started gateway before it is measured
# --compare: (workers, access log) per gateway; all run side by side and take turns.
QUIET_MAX_WAIT_S = 30.0  # before each load run, wait at most this long for the machine to be idle
QUIET_BUSY_PCT = 15.0  # "idle": at most this share of all cores busy over half a second
DISTURBED_PCT = 10.0  # a run during which other processes used more of the cores is left out of medians


class BenchError(Exception):
    """Something the benchmark cannot measure around: a process died, a check failed."""


class Processes:
    """Every process the benchmark starts, each in its own process group, stopped on exit."""

    def __init__(self) -> None:
        self._running: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(
        self, name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() reaches its workers too
            )
        self._running.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        self._running = [(n, p) for n, p in self._running if p is not proc]
        stop_group(proc)

    def stop_all(self) -> None:
        while self._running:
            _, proc = self._running.pop()
            stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; make sure nothing else of its group lingers.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return


LOCK_PATH = Path(tempfile.gettempdir()) / "tollgate-bench.lock"


@contextlib.contextmanager
def machine_lock(max_wait_s: float = 900.0) -> Iterator[float]:
    """One load benchmark at a time on this machine: take an flock on LOCK_PATH, waiting (bounded)
    while another run that uses it holds it. Yields the seconds waited."""
    import fcntl

    started = time.monotonic()
    with LOCK_PATH.open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - started > max_wait_s:
                    raise BenchError(f"another benchmark held {LOCK_PATH} for {max_wait_s:.0f}s") from None
                time.sleep(1.0)
        try:
            yield time.monotonic() - started
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def http(
    method: str,
    url: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def wait_http_ok(
    url: str, proc: subprocess.Popen[bytes], name: str, log: Path, seconds: float = WAIT_HEALTHY_S
) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{name} exited with code {proc.returncode}; see {log}:\n{_tail(log)}")
        with contextlib.suppress(OSError):
            status, _ = http("GET", url, timeout=1.0)
            if status == 200:
                return
        time.sleep(0.1)
    raise BenchError(f"{name} did not answer 200 at {url} within {seconds:.0f}s; see {log}:\n{_tail(log)}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _clock_ticks() -> int:
    return int(os.sysconf("SC_CLK_TCK"))


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on; comm may hold spaces


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    tree: list[int] = []
    todo = [root]
    while todo and len(tree) < 1000:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def cpu_seconds(pid: int) -> float | None:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / _clock_ticks()  # utime + stime


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class Server:
    """A server the benchmark started (gateway or floor proxy), with what it takes to measure it."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    settings: dict[str, Any]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}{CHAT_PATH}"

    def worker_pids(self) -> list[int]:
        """uvicorn's spawned workers; with one worker, the server process itself."""
        workers = [p for p in process_tree(self.proc.pid) if "spawn_main" in _cmdline(p)]
        return workers or [self.proc.pid]

    def wait_workers(self, workers: int, seconds: float = WAIT_HEALTHY_S) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name} exited with code {self.proc.returncode}:\n{_tail(self.log)}")
            if workers == 1 or len(self.worker_pids()) >= workers:
                return
            time.sleep(0.1)
        raise BenchError(f"{self.name} did not start {workers} workers within {seconds:.0f}s")


@dataclass
class Stack:
    """The upstreams, and the key the gateways know; servers are started on top of it."""

    tmp: Path
    procs: Processes
    upstream_kind: str  # "nginx" or "simulator"
    fast_port: int
    sim_port: int
    api_key: str
    key_hash: str
    # For the other bench modules (policy, metering, redaction...) that start their own gateway.
    gateway: subprocess.Popen[bytes] | None = None
    gateway_port: int = 0

    @property
    def direct_url(self) -> str:
        return f"http://{HOST}:{self.fast_port}{CHAT_PATH}"

    @property
    def gateway_url(self) -> str:
        return f"http://{HOST}:{self.gateway_port}{CHAT_PATH}"


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes {workers};
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; multi_accept on; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    keepalive_requests 100000000;
    keepalive_timeout 120s;
    server {{
        listen {host}:{port} backlog=4096;
        location = /v1/chat/completions {{
            default_type application/json;
            return 200 '{reply}';
        }}
        location = /health {{
            default_type application/json;
            return 200 '{{"status":"ok"}}';
        }}
        location / {{ return 404; }}
    }}
}}
"""


def nginx_binary() -> str | None:
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None
    )
    return found


def start_nginx(procs: Processes, tmp: Path, workers: int) -> tuple[subprocess.Popen[bytes], int]:
    binary = nginx_binary()
    if binary is None:
        raise BenchError("nginx is not installed")
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(workers=workers, tmp=tmp, host=HOST, port=port, reply=UPSTREAM_REPLY))
    log = tmp / "nginx.log"
    proc = procs.start(
        "nginx", [binary, "-p", str(tmp), "-e", str(tmp / "nginx-error.log"), "-c", str(conf)], log
    )
    wait_http_ok(f"http://{HOST}:{port}/health", proc, "nginx", tmp / "nginx-error.log")
    return proc, port


def start_simulator(procs: Processes, tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    log = tmp / "simulator.log"
    proc = procs.start(
        "simulator", [sys.executable, "-m", "simulator", "--host", HOST, "--port", str(port)], log
    )
    wait_http_ok(f"http://{HOST}:{port}/health", proc, "simulator", log)
    return proc, port


def start_stack(procs: Processes, tmp: Path, upstream: str, nginx_workers: int) -> Stack:
    from gateway.keys import generate_key, hash_key  # the gateway's own key format

    _, sim_port = start_simulator(procs, tmp)
    kind, fast_port = "simulator", sim_port
    if upstream in ("auto", "nginx"):
        try:
            _, fast_port = start_nginx(procs, tmp, nginx_workers)
            kind = "nginx"
        except BenchError as exc:
            if upstream == "nginx":
                raise
            print(f"nginx unavailable ({exc}); the simulator is the fast upstream", file=sys.stderr)
    key = generate_key()
    return Stack(tmp, procs, kind, fast_port, sim_port, key, hash_key(key))


def spine_config(stack: Stack, port: int, workers: int, access_log: bool) -> dict[str, Any]:
    """The gateway with nothing on: the two upstreams, one tenant, the benchmark's key."""
    return {
        "server": {
            "host": HOST,
            "port": port,
            "workers": workers,
            "access_log": access_log,
            "log_level": "info",
        },
        "upstreams": {
            "fast": {"kind": "openai_compat", "base_url": f"http://{HOST}:{stack.fast_port}/v1"},
            "sim": {"kind": "openai_compat", "base_url": f"http://{HOST}:{stack.sim_port}/v1"},
        },
        "models": {
            MODEL_ALIAS: [{"upstream": "fast", "model": "bench-upstream-model"}],
            STREAM_ALIAS: [{"upstream": "sim", "model": "bench-upstream-model"}],
        },
        "tenants": {"bench": {"models": ["*"]}},
        "keys": [{"tenant": "bench", "hash": stack.key_hash, "label": "bench"}],
    }


def start_gateway(stack: Stack, workers: int, access_log: bool) -> Server:
    port = free_port()
    config = spine_config(stack, port, workers, access_log)
    name = f"gateway-w{workers}-{'log' if access_log else 'nolog'}"
    config_path = stack.tmp / f"{name}.yaml"
    config_path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    # The access log is JSON lines on stderr: to a file, as a container runtime would collect it.
    log = stack.tmp / f"{name}.log"
    log.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config_path), "--port", str(port)]
    argv += ["--workers", str(workers)]
    proc = stack.procs.start(name, argv, log)
    server = Server(name, proc, port, log, {"workers": workers, "access_log": access_log})
    wait_http_ok(f"http://{HOST}:{port}/healthz", proc, name, log)
    server.wait_workers(workers)
    status, body = http("GET", f"http://{HOST}:{port}/readyz", timeout=5.0)
    if status != 200 or b'"down"' in body:
        raise BenchError(f"{name} is not ready: {status} {body[:300]!r}")
    _check_answers(server, {"authorization": f"Bearer {stack.api_key}"})
    return server


def start_floor(stack: Stack, workers: int) -> Server:
    """The bare proxy of bench/floor_proxy.py, in front of the same fast upstream."""
    port = free_port()
    name = f"floor-w{workers}"
    log = stack.tmp / f"{name}.log"
    argv = [sys.executable, "-m", "bench.floor_proxy", "--upstream", stack.direct_url]
    argv += ["--port", str(port), "--workers", str(workers)]
    proc = stack.procs.start(name, argv, log)
    server = Server(name, proc, port, log, {"workers": workers})
    wait_http_ok(f"http://{HOST}:{port}/healthz", proc, name, log)
    server.wait_workers(workers)
    _check_answers(server, {})
    return server


def _check_answers(server: Server, headers: dict[str, str]) -> None:
    """20 answers with the upstream's body; new connections, so every worker gets a chance."""
    headers = {"content-type": "application/json", **headers}
    deadline = time.monotonic() + WAIT_HEALTHY_S
    ok = 0
    for _ in range(200):
        if ok >= 20 or time.monotonic() > deadline:
            break
        status, body = http("POST", server.url, CHAT_BODY.encode(), headers, timeout=5.0)
        if status == 503:  # a worker still starting
            time.sleep(0.1)
            continue
        if status != 200 or b'"choices"' not in body:
            raise BenchError(f"{server.name} answered {status}: {body[:300]!r}")
        ok += 1
    if ok < 20:
        raise BenchError(f"{server.name} did not answer 20 requests in time")


WRK_SCRIPT = """\
wrk.method = "POST"
wrk.body = [[{body}]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH_JSON {{\\"requests\\":%d,\\"duration_us\\":%d,\\"bytes\\":%d," ..
    "\\"errors_connect\\":%d,\\"errors_read\\":%d,\\"errors_write\\":%d,\\"errors_status\\":%d," ..
    "\\"errors_timeout\\":%d,\\"lat_mean_us\\":%.2f,\\"lat_max_us\\":%.2f," ..
    "\\"p50_us\\":%.2f,\\"p90_us\\":%.2f,\\"p99_us\\":%.2f,\\"p999_us\\":%.2f}}\\n",
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
"""


def write_wrk_script(stack: Stack) -> Path:
    path = stack.tmp / "chat.lua"
    path.write_text(WRK_SCRIPT.format(body=CHAT_BODY, key=stack.api_key))
    return path


def wrk(url: str, script: Path, connections: int, seconds: float, *, latency: bool = False) -> dict[str, Any]:
    argv = [
        "wrk",
        "-t2",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "5s",
        "-s",
        str(script),
    ]
    if latency:
        argv.append("--latency")
    argv.append(url)
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=seconds + WRK_SLACK_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"wrk did not finish within {seconds + WRK_SLACK_S:.0f}s") from exc
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if done.returncode != 0 or line is None:
        raise BenchError(f"wrk failed ({done.returncode}): {done.stderr.strip()} {done.stdout[-500:]}")
    result: dict[str, Any] = json.loads(line.removeprefix("BENCH_JSON "))
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    result["errors"] = sum(result[k] for k in result if k.startswith("errors_"))
    result["connections"] = connections
    result["url"] = url
    if result["errors"]:
        print(f"  ! wrk reported {result['errors']} errors against {url}", file=sys.stderr)
    return result


def _machine_ticks() -> list[int]:
    """/proc/stat's first line: user nice system idle iowait irq softirq steal ..."""
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def _busy_and_total(before: list[int], after: list[int]) -> tuple[int, int]:
    delta = [a - b for a, b in zip(after, before, strict=False)][:8]
    total = max(sum(delta), 1)
    return total - delta[3] - delta[4], total


def _kernel_threads_cpu() -> float:
    """CPU seconds of kernel threads (children of kthreadd): ksoftirqd and kworkers do part of the
    loopback network work of our own load, so they are not counted as someone else's."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and (fields[1] == "2" or entry == "2"):
                total += (int(fields[11]) + int(fields[12])) / _clock_ticks()
    return total


def _our_cpu() -> float:
    """CPU seconds of this process, its reaped children (wrk) and its live descendants."""
    own = os.times()
    live = sum(cpu for pid in process_tree(os.getpid())[1:] if (cpu := cpu_seconds(pid)) is not None)
    return own.user + own.system + own.children_user + own.children_system + live


def wait_quiet(max_wait_s: float | None = None, threshold_pct: float = QUIET_BUSY_PCT) -> dict[str, float]:
    """Wait (bounded) until the machine is nearly idle: this is a shared box and other
    tests come and go. Between our runs nothing of ours is busy, so what is busy is someone else."""
    if max_wait_s is None:
        max_wait_s = QUIET_MAX_WAIT_S
    started = time.monotonic()
    busy_pct = 100.0
    for _ in range(int(max_wait_s / 0.5) + 1):
        before = _machine_ticks()
        time.sleep(0.5)
        busy, total = _busy_and_total(before, _machine_ticks())
        busy_pct = 100 * busy / total
        if busy_pct <= threshold_pct or time.monotonic() - started >= max_wait_s:
            break
    waited = time.monotonic() - started
    if busy_pct > threshold_pct:
        print(
            f"  ! machine still {busy_pct:.0f}% busy after {waited:.0f}s; measuring anyway", file=sys.stderr
        )
    return {"quiet_wait_s": waited, "busy_before_pct": busy_pct}


def served_load(
    url: str, root_pid: int | None, script: Path, connections: int, seconds: float, latency: bool = False
) -> dict[str, Any]:
    """A wrk run, with the CPU spent meanwhile by the serving process tree (if given), by the
    whole machine, and by processes that are not ours ("foreign": other work on the box)."""
    quiet = wait_quiet()
    pids = process_tree(root_pid) if root_pid is not None else []
    before = {pid: cpu for pid in pids if (cpu := cpu_seconds(pid)) is not None}
    kernel_before, machine_before, ours_before = _kernel_threads_cpu(), _machine_ticks(), _our_cpu()
    t0 = time.monotonic()
    result = wrk(url, script, connections, seconds, latency=latency)
    machine_after, ours_after, elapsed = _machine_ticks(), _our_cpu(), time.monotonic() - t0
    kernel_s = _kernel_threads_cpu() - kernel_before
    after = {pid: cpu for pid in pids if (cpu := cpu_seconds(pid)) is not None}
    busy, total = _busy_and_total(machine_before, machine_after)
    capacity_s = elapsed * (os.cpu_count() or 1)
    busy_s = capacity_s * busy / total
    result.update(quiet)
    result["machine_busy_pct"] = 100 * busy / total
    result["machine_steal_pct"] = 100 * (machine_after[7] - machine_before[7]) / total
    result["kernel_threads_cpu_pct"] = 100 * kernel_s / capacity_s
    result["foreign_cpu_pct"] = max(0.0, 100 * (busy_s - (ours_after - ours_before) - kernel_s) / capacity_s)
    # Ours only (wrk, upstream, servers): 1000 * cores / this is the machine's RPS ceiling.
    result["our_cpu_ms_per_request"] = 1000 * (ours_after - ours_before) / max(result["requests"], 1)
    if root_pid is not None:
        cpu = sum(after[pid] - before[pid] for pid in after if pid in before)
        result["cpu_s"] = cpu
        result["cpu_ms_per_request"] = 1000 * cpu / max(result["requests"], 1)
    return result


def serve_gateway(stack: Stack, name: str, config_for_port: Callable[[int], dict[str, Any]]) -> None:
    """`tollgate serve` on a free port with the config `config_for_port(port)`, as
    `stack.gateway`, once it answers and both workers are up."""
    port = free_port()
    path = stack.tmp / f"gateway-{name}.yaml"
    path.write_text(json.dumps(config_for_port(port)))  # JSON is YAML
    log = stack.tmp / f"gateway-{name}.log"
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", str(port)]
    stack.gateway = stack.procs.start(f"gateway-{name}", argv, log)
    stack.gateway_port = port
    wait_http_ok(f"http://{HOST}:{port}/healthz", stack.gateway, "the gateway", log)
    time.sleep(2)  # both workers up


def alternating_gateways(
    stack: Stack, starts: Mapping[str, Callable[[], None]], script: Path, rounds: int, seconds: float
) -> dict[str, Any]:
    """wrk c64 through each gateway variant in turn (`starts[name]()` starts it as
    `stack.gateway`), `rounds` times, each after a warm-up; medians of RPS and gateway
    CPU per request."""
    rps: dict[str, list[float]] = {name: [] for name in starts}
    cpu: dict[str, list[float]] = {name: [] for name in starts}
    for _ in range(rounds):
        for name, start in starts.items():
            start()
            assert stack.gateway is not None
            # A fresh gateway's first seconds cost more (connections opened, caches filled).
            wrk(stack.gateway_url, script, 64, WARMUP_S)
            run = served_load(stack.gateway_url, stack.gateway.pid, script, 64, seconds)
            if run["errors"] or run.get("non2xx"):
                raise BenchError(f"{name}: wrk saw errors: {run}")
            rps[name].append(run["rps"])
            cpu[name].append(run["cpu_ms_per_request"])
            stack.procs.stop(stack.gateway)
            stack.gateway = None
    return {
        "upstream": stack.upstream_kind,
        "rps": {name: statistics.median(v) for name, v in rps.items()},
        "cpu_ms_per_request": {name: statistics.median(v) for name, v in cpu.items()},
        "runs": rps,
    }


@dataclass
class _Conn:
    host: str
    port: int
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None

    async def ensure(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is not None and self.writer is not None:
            return self.reader, self.writer
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 5.0)
        self.reader, self.writer = reader, writer
        return reader, writer

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.writer.wait_closed(), 2.0)
        self.reader = self.writer = None


def _stream_request(port: int, body: bytes, key: str) -> bytes:
    head = (
        f"POST {CHAT_PATH} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nAuthorization: Bearer {key}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _one_stream(conn: _Conn, request: bytes, limit_s: float) -> tuple[float, float]:
    """Send one streamed request on a keep-alive connection; (time to first body byte, to the end)."""
    reader, writer = await conn.ensure()
    async with asyncio.timeout(limit_s):
        started = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip().lower()
        body = bytearray()
        first_at = 0.0
        if headers.get("transfer-encoding") == "chunked":
            for _ in range(100_000):
                size = int((await reader.readline()).split(b";")[0].strip(), 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b""):
                        pass
                    break
                data = await reader.readexactly(size + 2)
                if not first_at:
                    first_at = time.perf_counter()
                body += data[:-2]
        else:
            length = int(headers.get("content-length", "0"))
            if length:
                body += await reader.readexactly(1)
                first_at = time.perf_counter()
                body += await reader.readexactly(length - 1)
        ended = time.perf_counter()
    if headers.get("connection") == "close":
        await conn.close()
    if status != 200 or b"[DONE]" not in body:
        raise BenchError(f"streamed request failed: HTTP {status}: {bytes(body[:300])!r}")
    return first_at - started, ended - started


async def _stream_series(stack: Stack, gateway_port: int, n: int, warmup: int) -> dict[str, list[float]]:
    """n streamed requests to each of the simulator and the gateway, alternating one by one, so
    that both series see the same machine noise."""

    def body(model: str) -> bytes:
        doc = json.loads(CHAT_BODY)
        doc["model"], doc["stream"] = model, True
        return json.dumps(doc, separators=(",", ":")).encode()

    direct = _Conn(HOST, stack.sim_port)
    gateway = _Conn(HOST, gateway_port)
    direct_req = _stream_request(stack.sim_port, body("bench-upstream-model"), stack.api_key)
    gateway_req = _stream_request(gateway_port, body(STREAM_ALIAS), stack.api_key)
    out: dict[str, list[float]] = {
        "direct_ttfb": [],
        "gateway_ttfb": [],
        "direct_total": [],
        "gateway_total": [],
    }
    try:
        for i in range(warmup + n):
            d_first, d_total = await _one_stream(direct, direct_req, 10.0)
            g_first, g_total = await _one_stream(gateway, gateway_req, 10.0)
            if i >= warmup:
                out["direct_ttfb"].append(d_first)
                out["gateway_ttfb"].append(g_first)
                out["direct_total"].append(d_total)
                out["gateway_total"].append(g_total)
    finally:
        await direct.close()
        await gateway.close()
    return out


def stream_ttfb(stack: Stack, gateway: Server, n: int, warmup: int) -> dict[str, Any]:
    async def bounded() -> dict[str, list[float]]:
        async with asyncio.timeout(60 + 0.2 * (n + warmup)):
            return await _stream_series(stack, gateway.port, n, warmup)

    series = asyncio.run(bounded())
    summary: dict[str, Any] = {"n": n, "warmup": warmup}
    for name, values in series.items():
        summary[name] = {"p50_ms": 1000 * percentile(values, 50), "p99_ms": 1000 * percentile(values, 99)}
    return summary


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))  # nearest rank
    return ordered[index]


INTRO = """\
# Benchmarks

What the gateway costs on top of the upstream it fronts, measured by `bench/overhead.py`
(see `bench/README.md`). It starts, as separate processes on 127.0.0.1:

- a fast upstream: nginx `return 200` with a fixed ~300-byte `chat.completion` (the simulator in
  zero-latency mode when nginx is not installed; each section says which was used);
- the upstream simulator in zero-latency mode, for streams (nginx cannot stream SSE sensibly);
- the floor: `bench/floor_proxy.py`, a bare aiohttp ASGI proxy (see "The floor" below), on
  the same uvicorn settings, so the distance between the gateway and what any Python proxy
  can do is measured in the same run;
- the gateway, `python -m gateway.cli serve` (uvicorn + uvloop + httptools), one tenant, one
  key, access log on and written to a file, as in production.

wrk (`-t2`, a ~200-byte chat completion body with an `Authorization` header) then loads the
upstream directly, the floor and the gateway, one after the other within each round:

- **RPS at c64**: requests per second with 64 connections, 10 s per run.
- **Latency at c8**: wrk's p50/p99 with 8 connections; *added* is gateway minus direct.
- **Stream TTFB**: a small asyncio socket client (not the gateway's code) sends N sequential
  streamed requests, alternating direct (simulator) and through the gateway, and times the
  first body byte; *added* is the difference of the medians. *Whole stream* is the time to
  the last byte.
- **CPU per request**: utime+stime of all the server's processes (`/proc/<pid>/stat`) over the
  runs, divided by the requests wrk completed.
- **RSS per worker**: `VmRSS` of each uvicorn worker after the load; the largest is reported.

The machine is a 2-core VM, shared by wrk, the servers and the upstream, and also by other
sessions' work (test suites, experiments), so absolute figures move a lot from run to run.
Before each load run the benchmark waits (bounded) for the machine to be idle, and it
records how much CPU other processes used during each run ("foreign CPU"); runs where that
exceeded 10 % of the cores are left out of the medians. Each figure below is from one run,
with its direct baseline (and the floor) measured in that same run: read the ratios and
differences rather than the absolute numbers. Every run is kept in `bench/results/*.json`
(not committed). CPU per request is the figure least affected by the sharing.

**The floor.** A 40-line raw ASGI proxy with no checks: read the body, `orjson`-parse it, set
`model`, re-serialise, POST it upstream with one `aiohttp.ClientSession` per worker
(connection limit 200), return the body; uvicorn with uvloop and httptools. Measured on this
machine in front of a fast C upstream with `wrk -t2` and a ~200-byte body (2026-11-22,
+-20 % since load generator, proxy and upstream share the 2 cores): 9,750 RPS at c64 with 1
worker, 15,870 with 2 (p50 / p99 at c8: 0.50 / 0.85 ms); the same proxy on `httpx` with its
aiohttp transport 4,150 / 7,170, and on `httpx`'s default transport 595 / 1,370. For scale,
on the same harness: Portkey's gateway (Node) 1,817 RPS, LiteLLM's proxy 143 (1 worker) and
223 (2 workers). The HTTP client inside the proxy is the largest single choice for
throughput; that is why the gateway's upstream client is aiohttp.
"""


def git_revision() -> str:
    """Short HEAD, marked when the tree has uncommitted changes and when its request path is
    compiled (scripts/compile.sh); "unknown" outside a checkout."""
    from gateway.build import compiled

    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=True)
        marked = (("uncommitted changes", bool(dirty.stdout.strip())), ("compiled", compiled()))
        marks = [mark for mark, on in marked if on]
        return head.stdout.strip() + (f" ({', '.join(marks)})" if marks else "")
    return "unknown"


def run_meta(argv: list[str] | None) -> dict[str, str]:
    """What every benchmark section records about its run: arguments, date, revision."""
    return {
        "args": "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:])),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "git": git_revision(),
    }


def save_results(name: str, payload: dict[str, Any]) -> Path:
    """Keep a run's raw figures in bench/results/NAME-STAMP.json (gitignored)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS_DIR / f"{name}-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2))
    return path


def met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def update_doc(section: str, markdown: str) -> None:
    start, end = f"<!-- bench:{section}:start -->", f"<!-- bench:{section}:end -->"
    text = DOC.read_text() if DOC.exists() else INTRO
    block = f"{start}\n{markdown.rstrip()}\n{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        text = before + block + after
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


def run_header(meta: dict[str, Any]) -> str:
    return (
        f"- Command: `{meta['command']}`\n"
        f"- Date: {meta['date']} · git {meta['git']}\n"
        f"- Machine: {meta['machine']}\n"
        f"- Upstream: {meta['upstream']}; streams: the simulator, zero-latency mode\n"
        f"- Versions: {meta['versions']}\n"
    )
