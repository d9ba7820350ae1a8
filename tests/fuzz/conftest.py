"""The fuzz session's servers, started once (docs/fuzzing.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controlplane.router.upstream import UpstreamTimeouts
from tests.fuzz.member_scripts import MAX_ANSWER_BYTES
from tests.fuzz.proxy import ProxyOptions
from tests.fuzz.servers import Harness, fuzz_servers

#: The member-side proxy's read timeout: a stalled member costs an example this long.
MEMBER_READ_TIMEOUT = 0.3


@pytest.fixture(scope="session")
def harnesses() -> Iterator[dict[str, Harness]]:
    options = {
        "requests": ProxyOptions(),
        "members": ProxyOptions(
            max_answer_bytes=MAX_ANSWER_BYTES,
            timeouts=UpstreamTimeouts(connect=1.0, read=MEMBER_READ_TIMEOUT),
        ),
    }
    with fuzz_servers(options) as started:
        yield started


@pytest.fixture(scope="session")
def request_path(harnesses: dict[str, Harness]) -> Harness:
    """The proxy whose member always answers a healthy 200."""
    return harnesses["requests"]


@pytest.fixture(scope="session")
def member_side(harnesses: dict[str, Harness]) -> Harness:
    """The proxy whose member plays each example's script (small read timeout)."""
    return harnesses["members"]
