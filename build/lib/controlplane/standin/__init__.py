"""The local node stand-in: plays the node for the operator's Deployments locally.

The local control plane (:mod:`controlplane.envtest`) has no kubelet, no kube-proxy and none of
the built-in controllers that turn a Deployment into running pods, so ``make dev``, ``make demo``
and the e2e tests run this stand-in (``controlplane sim-node``) as the admin. It plays member pods
as simulator processes (:mod:`controlplane.sim`) and router-proxy pods as ``controlplane
router-proxy`` processes under their ServiceAccount, and writes the pod statuses, Deployment
statuses and EndpointSlices the real node and controllers would.

* :mod:`~controlplane.standin.builders`: the pure parts (pods, Deployment status, slices, command
  lines), tested on their own;
* :mod:`~controlplane.standin.controller`: the reconciler that reads and writes them, and
  :func:`~controlplane.standin.controller.run_node`;
* :mod:`~controlplane.standin.process`: the pod processes; :mod:`~controlplane.standin.tokens`:
  their ServiceAccount credentials; :mod:`~controlplane.standin.forwarder`: a router Service's
  one local address;
* :mod:`~controlplane.standin.settings` and :mod:`~controlplane.standin.command`: its knobs and
  command line (light: the CLI imports them at start-up).

It uses the framework (:mod:`controlplane.runtime`) and runs the simulator, but knows nothing of
the controllers: the labels it recognises are repeated in the builders.
"""

from __future__ import annotations

from controlplane.standin.settings import NodeSettings

__all__ = ["NodeSettings"]
