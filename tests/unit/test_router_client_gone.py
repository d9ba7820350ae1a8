"""A client that leaves takes its request out of this replica's demand (issue 40).

The app is driven as uvicorn drives it (ASGI 2.3): the body, then ``receive()`` waits until the
client leaves or the response is complete and says ``http.disconnect``; a ``send`` to a client
that left is dropped without an error. So only ``receive()`` can tell the proxy that nobody waits
for the request any more.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from starlette.types import Message

from controlplane.router.activator import Activator
from controlplane.router.app import ProxyContext, build_app
from controlplane.router.clientgone import ClientWatch, unless_client_leaves
from controlplane.router.errors import PoolBusy
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.routing import Route as BackendRoute
from controlplane.router.upstream_httpx import HttpxUpstream
from tests.unit.activator_helpers import until
from tests.unit.router_fakes import FakeApi, FakeView
from tests.unit.test_router_routing import ISVCS, POOLS, ROUTER, _member

pytestmark = pytest.mark.anyio


class UvicornClient:
    """One connection as uvicorn shows it to the app; :meth:`leave` cuts it."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = json.dumps(body).encode()
        self.read = False
        self.ended = anyio.Event()  # the client left, or the response is complete
        self.gone = False
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        if not self.read:
            self.read = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.ended.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.gone:
            return  # uvicorn drops it: no error
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.ended.set()

    def leave(self) -> None:
        self.gone = True
        self.ended.set()

    def scope(self) -> dict[str, Any]:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.body)).encode()),
        ]
        return {"type": "http", "method": "POST", "path": "/v1/chat/completions",
                "headers": headers, "query_string": b""}  # fmt: skip


class StallingBody(httpx.AsyncByteStream):
    """A member's body: its first bytes, then nothing until the test ends; closed is noted."""

    def __init__(self, first: bytes) -> None:
        self.first = first
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.first
        await anyio.sleep_forever()

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()  # a real close awaits: where a cancellation lands
        self.closed = True


def proxy(member: httpx.MockTransport, keepalive: float = 0.0) -> tuple[Any, Activator]:
    """The proxy over pool gpu-0: b (qwen-2-7b) the Ready resident, a (llama-3-8b) cold, and
    nobody to bring a up (its request is held until its budget)."""
    view = FakeView()
    view.pools["gpu-0"] = copy.deepcopy(POOLS["gpu-0"])
    view.isvcs.update(copy.deepcopy(ISVCS))
    view.make_resident("gpu-0", "b")
    activator = Activator(view, LeaseCoordinator(FakeApi(), "ns", "me"), "ns")
    context = ProxyContext(
        lambda: ROUTER, view.pool, view.isvc, lambda: [], tracing=False,
        held_stream_keepalive=keepalive,
    )  # fmt: skip
    return build_app(context, activator, HttpxUpstream(member)), activator


def held(activator: Activator) -> dict[str, tuple[int, float]]:
    return activator.local.held("gpu-0")


@pytest.mark.parametrize(
    ("case", "model", "stream", "keepalive"),
    [
        ("held for a cold member", "llama-3-8b", False, 0.0),
        ("held as a kept-alive stream", "llama-3-8b", True, 0.05),
        ("a held stream waiting for the member's head", "qwen-2-7b", True, 0.05),
        ("in a held stream's relay", "qwen-2-7b", True, 0.05),
    ],
)
async def test_a_client_that_leaves_leaves_no_demand_and_no_request_in_flight(
    case: str, model: str, stream: bool, keepalive: float
) -> None:
    """Before: a held request stayed in the demand report until its budget (300 s here), a
    request cancelled while it waited for its member's head stayed in flight for good, keeping
    the member "active", and a held stream was relayed to its end for nobody."""
    asked = anyio.Event()
    body = StallingBody(b"data: {}\n\n")

    async def member(request: httpx.Request) -> httpx.Response:
        asked.set()
        if case == "a held stream waiting for the member's head":
            await anyio.sleep_forever()
        return httpx.Response(200, stream=body, headers={"content-type": "text/event-stream"})

    app, activator = proxy(httpx.MockTransport(member), keepalive)
    view: Any = activator.view
    if model == "qwen-2-7b":  # b is not ready when asked: held, then dispatched to it
        view.isvcs["b"]["status"] = {"phase": "Starting"}
    client = UvicornClient({"model": model, "messages": [{"role": "user", "content": "hi"}],
                            "stream": stream})  # fmt: skip
    finished = anyio.Event()

    async def serve() -> None:
        await app(client.scope(), client.receive, client.send)
        finished.set()

    async with anyio.create_task_group() as group:
        group.start_soon(activator.start)
        await until(lambda: activator._group is not None)
        group.start_soon(serve)
        if model == "llama-3-8b":
            await until(lambda: "a" in held(activator))
        else:
            await until(lambda: "b" in held(activator))
            view.make_resident("gpu-0", "b")
            activator.notifier.notify()
            await asked.wait()
            await until(lambda: activator.inflight.count("b") == 1)
        client.leave()
        with anyio.fail_after(3):
            await finished.wait()
        group.cancel_scope.cancel()
    assert held(activator) == {}
    assert activator.held == 0
    assert activator.inflight.count("b") == 0
    if case == "in a held stream's relay":
        assert body.closed, "the member's answer is closed, not read to its end for nobody"


async def test_a_request_for_a_ready_member_is_not_watched() -> None:
    """The fast path pays no listener task: a ready member's request never calls ``receive()``
    after its body (its client leaving is seen when the answer is sent, as before)."""
    reads: list[str] = []

    async def member(request: httpx.Request) -> httpx.Response:
        answer = b'{"ok":true}'
        return httpx.Response(
            200, stream=httpx.ByteStream(answer), headers={"content-length": str(len(answer))}
        )

    app, _ = proxy(httpx.MockTransport(member))
    client = UvicornClient({"model": "qwen-2-7b", "messages": [{"role": "user", "content": "hi"}]})

    async def receive() -> Message:
        reads.append("receive")
        return await client.receive()

    await app(client.scope(), receive, client.send)
    assert reads == ["receive"]
    assert client.sent[0]["status"] == 200


async def test_the_work_is_cancelled_when_the_client_leaves_and_only_then() -> None:
    client = UvicornClient({})
    await client.receive()  # the body, read by the app before the watch starts
    cancelled = anyio.Event()

    async def waits(_: ClientWatch) -> str:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    async with anyio.create_task_group() as group:

        async def watched() -> None:
            result, watch = await unless_client_leaves(client.receive, client.send, waits)
            assert result is None
            assert watch.left

        group.start_soon(watched)
        await anyio.sleep(0.05)
        assert not cancelled.is_set()
        client.leave()
    assert cancelled.is_set()


async def test_a_complete_answer_is_no_client_leaving() -> None:
    """uvicorn's ``receive()`` says ``http.disconnect`` once the response is complete too: the
    work that sent it goes on to its end (its bookkeeping after the last body is not cut)."""
    client = UvicornClient({})
    await client.receive()
    after_the_answer: list[str] = []

    async def answers(watch: ClientWatch) -> str:
        await watch.send({"type": "http.response.start", "status": 200, "headers": []})
        await watch.send({"type": "http.response.body", "body": b"{}", "more_body": False})
        await anyio.sleep(0.05)  # the listener has seen http.disconnect by now
        after_the_answer.append("bookkept")
        return "done"

    result, watch = await unless_client_leaves(client.receive, client.send, answers)
    assert (result, watch.left, after_the_answer) == ("done", False, ["bookkept"])


async def test_the_works_own_error_is_raised_as_itself() -> None:
    """Not wrapped in the task group's ExceptionGroup: the handler that answers a ProxyError
    must still catch it."""
    client = UvicornClient({})
    await client.receive()

    async def refuses(_: ClientWatch) -> str:
        raise PoolBusy("pool gpu-0: busy", retry_after=3)

    with pytest.raises(PoolBusy):
        await unless_client_leaves(client.receive, client.send, refuses)


async def test_a_closure_applied_between_a_requests_choice_and_its_count_sends_it_back_to_be_held() -> (  # noqa: E501
    None
):
    """The fenced drain's one rule on a replica (docs/design.md, "One fenced drain"): a request
    is counted in flight before its admission is checked again, so a closure our cache applied
    while the request was on its way out of its hold is seen here and the request is held again
    (before: it was sent to the member the pool drains, uncounted in the report that had just
    acknowledged the closure)."""
    sent_while_closed: list[bool] = []
    app, activator = proxy(httpx.MockTransport(lambda request: record(request)))
    view: Any = activator.view
    status = view.pools["gpu-0"]["status"]

    def record(request: httpx.Request) -> httpx.Response:
        sent_while_closed.append("b" in (status.get("admissionClosed") or []))
        return httpx.Response(200, json={"choices": []})

    holds = 0

    async def hold(route: BackendRoute) -> str:
        nonlocal holds
        holds += 1
        url = activator.view.member_urls(route.member)[0]
        if holds == 1:  # the pool closes b as this hold hands its address over
            status.update(admissionClosed=["b"], admissionGeneration=1)
        else:  # its next turn: reopened
            status.update(admissionClosed=[])
        return str(url)

    route = BackendRoute("qwen-2-7b", "b", "gpu-0")
    view.isvcs["b"]["status"] = {"phase": "Starting"}  # not ready: the request is held
    answer, _, release = await app._dispatch("/v1/chat/completions", {}, route, b"{}", hold)
    release()
    await answer.aclose()
    assert holds == 2, "the request was not held again once admission closed"
    assert sent_while_closed == [False], "sent to a member whose admission was closed"
    assert activator.inflight.count("b") == 0


@pytest.mark.parametrize("stopping", [None, "stopping: SIGTERM received"])
async def test_a_stopping_replica_closes_each_connection_after_its_answer(
    stopping: str | None,
) -> None:
    """Once the replica stops, every answer's head says ``Connection: close`` (the server closes
    kept-alive connections as it stops: a client that sent its next request on one got no answer
    at all); before, none does."""
    app, _ = proxy(_member(200, b'{"ok": 1}', "application/json"))
    app.context = dataclasses.replace(app.context, stopping=lambda: stopping)
    client = UvicornClient({"model": "qwen-2-7b", "messages": [{"role": "user", "content": "hi"}]})
    await app(client.scope(), client.receive, client.send)
    start = next(m for m in client.sent if m["type"] == "http.response.start")
    assert start["status"] == 200
    closing = (b"connection", b"close") in list(start["headers"])
    assert closing == (stopping is not None)
