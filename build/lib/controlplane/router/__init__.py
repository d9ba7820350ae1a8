"""The router-proxy: an OpenAI-compatible HTTP proxy with a per-pool activator (docs/router.md).

Layers, top to bottom: :mod:`.process` wires a :class:`~controlplane.runtime.manager.Manager`
(informers, no leader election: every replica serves) to the HTTP app (:mod:`.app`); the app asks
:mod:`.routing` which backend and member a request's ``model`` names, and :mod:`.activator` for a
ready upstream URL; the activator coordinates swaps with other replicas through the pool's Lease
(:mod:`.lease`) and counts in-flight requests (:mod:`.inflight`). Errors are a small hierarchy
(:mod:`.errors`) mapped to OpenAI-style bodies in one place.
"""
