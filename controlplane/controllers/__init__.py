"""The operator's controllers: InferenceService, ModelPool and ModelRouter, one package each.

* :mod:`~controlplane.controllers.inferenceservice`, :mod:`~controlplane.controllers.modelpool`,
  :mod:`~controlplane.controllers.modelrouter`: each split into what is wanted or decided (pure),
  what is reported (pure) and the reconciler that reads the caches and writes;
* :mod:`~controlplane.controllers.children`: what the controllers share about the children they
  write (server-side apply bodies, the spec hash, ownership, a Deployment's conditions);
* :mod:`~controlplane.controllers.rbac`: every permission the operator and the proxies need, the
  single source the RBAC manifests are rendered from and checked against.

Reconcilers take a client, their informers and an event recorder; the ``setup_*`` functions wire
them from a manager.
"""
