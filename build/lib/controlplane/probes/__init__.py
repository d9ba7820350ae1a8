"""Member idle probes: how the pool controller asks a model server whether it is idle.

Named ``probes`` (not ``runtimes``) so it is never mistaken for the framework, ``runtime/``.

A pool may drain a member only when the member's server says no request is in flight. Each
runtime answers that question its own way; :mod:`controlplane.probes.idle` holds the shared
vocabulary (:class:`IdleOutcome`, :class:`IdleReport`, the :class:`IdleProbe` protocol) and each
runtime module one probe (llama.cpp: :class:`controlplane.probes.llamacpp.SlotsProbe`).

This package knows nothing of the controllers, the operator, the CLI or the simulator (an
import-linter contract): a probe is an HTTP client with a timeout and a parser, testable alone.
"""
