"""The local node stand-in: plays the node for the operator's Deployments and Jobs locally.

The local control plane (:mod:`controlplane.envtest`) has no kubelet, no scheduler, no kube-proxy
and none of the built-in controllers that turn a Deployment into running pods, so ``make dev``,
``make demo`` and the e2e tests run this stand-in (``controlplane sim-node``) as the admin. It
registers a Node whose kubelet endpoint serves container logs, plays member pods as simulator
processes (:mod:`controlplane.sim`) after their init containers, router-proxy pods as
``controlplane router-proxy`` processes under their ServiceAccount, and Job pods (made by
kube-controller-manager's job-controller) as ``controlplane fetch-model`` processes run to their
end; and it writes the pod statuses, Deployment statuses and EndpointSlices the real node and
controllers would.

* :mod:`~controlplane.standin.builders`: the pure parts (pods, Deployment status, slices, command
  lines), tested on their own, and the modules they name (pod status, volumes, environment,
  containers, termination messages, logs, the Node);
* :mod:`~controlplane.standin.controller`: the reconciler that reads and writes them, and
  :func:`~controlplane.standin.controller.run_node`; :mod:`~controlplane.standin.jobs`: the
  scheduler and kubelet for a Job's pods; :mod:`~controlplane.standin.runner`: a pod's volumes,
  init containers and containers, step by step; :mod:`~controlplane.standin.kubeletapi`: the
  log endpoint;
* :mod:`~controlplane.standin.process` and :mod:`~controlplane.standin.servers`: the pod
  processes; :mod:`~controlplane.standin.tokens`: their ServiceAccount credentials;
  :mod:`~controlplane.standin.forwarder`: a router Service's one local address;
* :mod:`~controlplane.standin.settings` and :mod:`~controlplane.standin.command`: its knobs and
  command line (light: the CLI imports them at start-up).

It uses the framework (:mod:`controlplane.runtime`), runs the simulator and the project's
subcommands, and takes its kubelet certificate from :mod:`controlplane.envtest.pki`, but knows
nothing of the controllers: the labels it recognises are repeated in the builders.
"""

from __future__ import annotations

from controlplane.standin.settings import NodeSettings

__all__ = ["NodeSettings"]
