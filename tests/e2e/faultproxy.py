"""A proxy between one process and the API server: it records every write and injects faults.

The fault harness (docs/faults.md) puts one of these in front of each process it tests (the
operator, a router-proxy replica): the process's kubeconfig points at the proxy (plain HTTP on
loopback, the process's own bearer token passed through), and the proxy forwards to the real
kube-apiserver over TLS. Because it sits on the wire it needs nothing from the code under test:

* **Every write is recorded** (:class:`Write`: method, resource, object, status, and a one-line
  summary of what it set), which is how the harness enumerates the write points of a swap from a
  fault-free run instead of by hand.
* **Crash after a write** (:data:`KILL`): once the API server has answered a write the fault
  names, the process is SIGKILLed before the answer is relayed: the write is committed and the
  process never learned it, Sieve's "crash after each write".
* **Pause after a write** (:data:`STOP`): the process is SIGSTOPped once the answer is relayed; the
  harness sends SIGCONT later (the paused leader).
* **Held-back watch events**: :meth:`Fault.hold` may hold one event for a while; later events of
  the same watch stream wait behind it (one stream is ordered, and so is what it delivers), and
  then all are delivered. Holding every event of every stream for a while is a lagging view.

The proxy runs in a thread with an event loop of its own (as the invariant monitor does), so the
test's loop being busy cannot delay what the process under test sees.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import parse_qs

import anyio
import httpx
import msgspec
import yaml
from anyio.from_thread import BlockingPortal, start_blocking_portal

from controlplane.runtime.config import ClientConfig
from controlplane.runtime.httpserver import bind, serve

Object = dict[str, Any]
Action = Literal["kill", "stop"]
KILL: Final[Action] = "kill"
STOP: Final[Action] = "stop"
WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Headers passed on to the API server as the process sent them.
FORWARDED: Final = ("authorization", "content-type", "accept", "user-agent")
#: How long a non-watch request may take upstream.
UPSTREAM_TIMEOUT: Final = 60.0
_decode = msgspec.json.Decoder()


@dataclass(frozen=True)
class Write:
    """One write the process made, as the API server answered it."""

    seq: int
    at: float  # time.monotonic() when answered
    method: str
    resource: str  # "deployments", "modelpools/status", ...
    namespace: str
    name: str
    status: int
    summary: str

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status < 300

    def describe(self) -> str:
        where = f"{self.resource}/{self.name}" if self.name else self.resource
        return f"{self.method} {where}" + (f" ({self.summary})" if self.summary else "")


class Fault:
    """What the proxy asks while relaying; the default injects nothing."""

    def after_write(self, write: Write) -> Action | None:
        """Called once the API server answered ``write``: :data:`KILL`, :data:`STOP` or None."""
        return None

    def hold(self, resource: str, event_type: str, obj: Object) -> float:
        """Seconds to hold this watch event (and everything behind it on its stream)."""
        return 0.0


@dataclass(frozen=True)
class Route:
    """What a request path names: ``/apis/G/V/namespaces/NS/RESOURCE/NAME/SUB``."""

    resource: str
    namespace: str
    name: str

    @classmethod
    def of(cls, path: str) -> Route:
        parts = [p for p in path.split("/") if p]
        parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
        namespace = ""
        if len(parts) >= 2 and parts[0] == "namespaces":
            namespace, parts = parts[1], parts[2:]
            if not parts:  # the namespace itself
                return cls("namespaces", "", namespace)
        resource = parts[0] if parts else ""
        name = parts[1] if len(parts) > 1 else ""
        if len(parts) > 2:
            resource = f"{resource}/{parts[2]}"
        return cls(resource, namespace, name)


def summarize(route: Route, body: Object | None) -> str:
    """A few words on what a write set: enough to tell the write points of a swap apart."""
    if not isinstance(body, dict):
        return ""
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    if route.resource == "deployments":
        return f"replicas={spec.get('replicas')}"
    if route.resource == "modelpools/status":
        slots = ",".join(
            f"{m.get('name')}={m.get('slot') or '-'}" for m in status.get("members") or []
        )
        return (
            f"resident={status.get('residentMember')} pending={status.get('pendingMember')} {slots}"
        )
    if route.resource == "inferenceservices/status":
        decision = status.get("poolDecision") or {}
        return f"phase={status.get('phase')} decision={decision.get('slot')}"
    if route.resource == "leases":
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        target = next((v for k, v in annotations.items() if k.endswith("/target")), "")
        return f"holder={spec.get('holderIdentity') or '-'} target={target or '-'}"
    return ""


@dataclass
class FaultProxy:
    """The proxy for one process; :meth:`start` it, point the process at :attr:`url`."""

    upstream: ClientConfig
    name: str
    fault: Fault = field(default_factory=Fault)
    #: The process to kill or stop (set once it is started).
    pid: int | None = None
    #: Writes are recorded (and faults asked) only while armed; until then they only pass.
    armed: bool = False
    writes: list[Write] = field(default_factory=list)
    #: (monotonic time, what) of every fault injected.
    injected: list[tuple[float, str]] = field(default_factory=list)
    on_write: Callable[[Write], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _portal_cm: Any = None
    _portal: BlockingPortal | None = None
    _stop: anyio.Event | None = None
    _port: int = 0
    _http: Any = None
    _future: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def kubeconfig(self, token_kubeconfig: Path, path: Path) -> Path:
        """``token_kubeconfig`` (a bearer token's) pointed at this proxy instead."""
        config = yaml.safe_load(token_kubeconfig.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"] = {"server": self.url}
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def start(self) -> FaultProxy:
        sock = bind("127.0.0.1", 0)
        self._port = sock.getsockname()[1]
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        ready = threading.Event()

        async def run() -> None:
            self._stop = anyio.Event()
            async with httpx.AsyncClient(
                base_url=self.upstream.server, verify=self.upstream.ssl_context, timeout=None
            ) as http:
                self._http = http
                async with anyio.create_task_group() as group:
                    await group.start(serve, self._app, [sock])
                    ready.set()
                    await self._stop.wait()
                    group.cancel_scope.cancel()

        self._future = self._portal.start_task_soon(run)
        if not ready.wait(timeout=10):
            raise RuntimeError(f"fault proxy {self.name} did not start")
        return self

    def stop(self) -> None:
        if self._portal is None:
            return
        with contextlib.suppress(Exception):
            if self._stop is not None:
                self._portal.call(self._stop.set)
            self._future.result(timeout=15)
        self._portal_cm.__exit__(None, None, None)
        self._portal = None

    def successful_writes(self, since: float = 0.0) -> list[Write]:
        with self._lock:
            return [w for w in self.writes if w.succeeded and w.at >= since]

    # -- relaying ----------------------------------------------------------------------------

    async def _app(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        method = scope["method"]
        path = scope["path"]
        query = scope.get("query_string", b"").decode()
        headers = {
            k.decode().lower(): v.decode()
            for k, v in scope["headers"]
            if k.decode().lower() in FORWARDED
        }
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the process died mid-request: the API server would never see it whole
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        target = path + (f"?{query}" if query else "")
        watching = parse_qs(query).get("watch", [""])[0] in ("true", "1")
        request = self._http.build_request(method, target, headers=headers, content=body or None)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as err:
            await _answer(send, 502, f"fault proxy: upstream failed: {err}".encode())
            return
        try:
            if watching:
                await self._relay_watch_until_gone(Route.of(path), response, receive, send)
                return
            content = await response.aread()
        finally:
            await response.aclose()
        if method in WRITE_METHODS and self.armed:
            action = self._record(method, path, body, response.status_code)
            if action == KILL:
                return  # the process is dead; nobody reads an answer
            await _answer(send, response.status_code, content, response.headers)
            if action == STOP:
                self._signal(signal.SIGSTOP, "SIGSTOP")
            return
        await _answer(send, response.status_code, content, response.headers)

    def _record(self, method: str, path: str, body: bytes, status: int) -> Action | None:
        route = Route.of(path)
        parsed: Object | None = None
        with contextlib.suppress(msgspec.DecodeError):
            decoded = _decode.decode(body) if body else None
            parsed = decoded if isinstance(decoded, dict) else None
        with self._lock:
            write = Write(
                len(self.writes), time.monotonic(), method, route.resource, route.namespace,
                route.name, status, summarize(route, parsed),
            )  # fmt: skip
            self.writes.append(write)
        if self.on_write is not None:
            self.on_write(write)
        if not write.succeeded:
            return None
        action = self.fault.after_write(write)
        if action == KILL:
            self._signal(signal.SIGKILL, f"SIGKILL after {write.describe()}")
        elif action == STOP:
            self.injected.append((time.monotonic(), f"SIGSTOP after {write.describe()}"))
        return action

    def _signal(self, signum: signal.Signals, what: str) -> None:
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)
        if signum != signal.SIGSTOP:
            self.injected.append((time.monotonic(), what))

    async def _relay_watch_until_gone(
        self, route: Route, response: httpx.Response, receive: Any, send: Any
    ) -> None:
        """Relay the stream until it ends or the process goes (killed, or closing the watch)."""
        async with anyio.create_task_group() as group:

            async def until_disconnected() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(until_disconnected)
            await self._relay_watch(route, response, send)
            group.cancel_scope.cancel()

    async def _relay_watch(self, route: Route, response: httpx.Response, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        held_until = 0.0
        async for line in _lines(response):
            if self.armed and line.strip():
                with contextlib.suppress(msgspec.DecodeError):
                    event = _decode.decode(line)
                    if isinstance(event, dict) and isinstance(event.get("object"), dict):
                        hold = self.fault.hold(route.resource, str(event.get("type")),
                                               event["object"])  # fmt: skip
                        if hold > 0:
                            held_until = max(held_until, time.monotonic() + hold)
            wait = held_until - time.monotonic()
            if wait > 0:
                await anyio.sleep(wait)
            await send({"type": "http.response.body", "body": line, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _lines(response: httpx.Response) -> AsyncIterator[bytes]:
    """The watch stream's lines (one event each), newline kept."""
    pending = b""
    async for chunk in response.aiter_raw():
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line + b"\n"
    if pending:
        yield pending


async def _answer(
    send: Any, status: int, body: bytes, headers: Mapping[str, str] | None = None
) -> None:
    content_type = (headers or {}).get("content-type", "application/json")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type.encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
