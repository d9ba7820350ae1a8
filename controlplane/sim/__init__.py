"""A llama.cpp-compatible server simulator: the members our tests and ``make demo`` run.

There is no GPU and no model here, yet the pool controller drains a member only when its
``/slots`` says every slot is idle, and the router-proxy forwards OpenAI-style requests to members.
The simulator answers those endpoints the way llama.cpp's ``llama-server`` does, with knobs that
produce the situations tests need (slow loads, busy slots, a broken ``/slots``).

This package is imported by the CLI at start-up, so it stays light: the ASGI app and the server
(starlette, uvicorn) are imported only by the modules that need them.
"""

from __future__ import annotations

from controlplane.sim.settings import AnswerMode, SimSettings, SlotsMode

__all__ = ["AnswerMode", "SimSettings", "SlotsMode"]
