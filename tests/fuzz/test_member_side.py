"""Fuzzing the member side: whatever a member answers (valid, an error, garbage, cut off, too
long, stalled), the client gets a well-formed answer of the shape the contract gives for it, no
exception escapes, and no connection to the member is left open beyond the pool's one idle
kept-alive connection (docs/fuzzing.md). The member is a raw TCP server playing the drawn
script; the proxy forwards to it through the real aiohttp upstream client.
"""

from __future__ import annotations

import json
import time

from hypothesis import given

from tests.fuzz.member import MemberState
from tests.fuzz.member_oracle import answer_problems
from tests.fuzz.member_scripts import Case, member_case
from tests.fuzz.profiles import fuzz_settings
from tests.fuzz.servers import Harness
from tests.fuzz.wire import exchange

CHAT = json.dumps({"model": "solo", "messages": [{"role": "user", "content": "hi"}]}).encode()
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\n"
    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(CHAT), CHAT)
)
#: How long the member's connections may take to settle after the client's answer: the read
#: timeout (a stalled member is dropped at it) and some.
SETTLE_SECONDS = 3.0


def leaked(state: MemberState) -> list[str]:
    """The member's connections that are more than the pool's one idle kept-alive connection,
    once they had :data:`SETTLE_SECONDS` to settle."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        states = list(state.connections.values())
        if states.count("idle") <= 1 and all(s == "idle" for s in states):
            return []
        if time.monotonic() > deadline:
            return states
        time.sleep(0.01)


@fuzz_settings(ci_examples=150)
@given(case=member_case())
def test_any_member_answer_gets_the_client_a_defined_answer(
    member_side: Harness, case: Case
) -> None:
    member_side.errors.take()
    member_side.member.script = case.script
    received = exchange(member_side.port, REQUEST, timeout=5.0)
    problems = answer_problems(received, case.expected)
    assert not problems, "\n".join(problems)
    escaped = member_side.errors.take()
    assert not escaped, "\n".join(escaped)
    left = leaked(member_side.member.state)
    assert not left, f"member connections left open: {left}"
