"""Unit tests run their async tests on asyncio, the loop the framework runs on in production."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"
