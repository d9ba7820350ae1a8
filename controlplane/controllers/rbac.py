"""Every permission the operator and the router-proxy need: the single source of RBAC truth.

``hack/`` renders ``manifests/rbac/`` from these declarations and fails CI when they drift; the
preflight checks exactly these at start-up. Each controller's needs are declared under its name so
that a rule can be traced to the code that uses it. Verbs are spelled out: no wildcards.
"""

from __future__ import annotations

from controlplane.runtime.rbac import PolicyRule

GROUP = "inference.modelpool.dev"
#: Who holds these rules: the operator's ServiceAccount, in the namespace it is installed into.
OPERATOR_NAMESPACE = "modelpool-system"
OPERATOR_SERVICE_ACCOUNT = "modelpool-operator"
READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete")
STATUS = ("get", "update", "patch")

#: InferenceService controller: owns a Deployment, a Service, a NetworkPolicy and a
#: PodDisruptionBudget per InferenceService.
INFERENCE_SERVICE_RULES = (
    # Read, never written: its decisions go to its status and its children.
    PolicyRule((GROUP,), ("inferenceservices",), READ),
    PolicyRule((GROUP,), ("inferenceservices/status",), STATUS),
    PolicyRule((GROUP,), ("inferenceservices/finalizers",), ("update",)),
    PolicyRule(("apps",), ("deployments",), (*READ, *WRITE)),
    PolicyRule(("",), ("services",), (*READ, *WRITE)),
    # Its pods are watched to know when the last one is gone (Stopped), and one on a cordoned
    # node is deleted once its /slots say idle (disruption.py: a drain waits for idle).
    PolicyRule(("",), ("pods",), (*READ, "delete")),
    # The KV cache's readiness gate: one condition patched on a pod's status once it is restored.
    PolicyRule(("",), ("pods/status",), ("patch",)),
    # Where a pod's server answers before it is Ready (to restore its KV cache), and to save it.
    PolicyRule(("discovery.k8s.io",), ("endpointslices",), READ),
    # Pools are read (never written): a member's Deployment is raised only with its pool's grant.
    PolicyRule((GROUP,), ("modelpools",), READ),
    # The weights' fetch Jobs (created, replaced when the source changes), and the last line of
    # their pod's log: how far the download is (controllers/inferenceservice/fetching.py).
    PolicyRule(("batch",), ("jobs",), (*READ, *WRITE)),
    PolicyRule(("",), ("pods/log",), ("get",)),
    # Nodes are read (never written): weights cached on a node that has left are fetched again.
    PolicyRule(("",), ("nodes",), READ),
    # Each member's NetworkPolicy: only router-proxies and the operator reach its port
    # (controllers/inferenceservice/network.py); deleted when the flag turns them off.
    PolicyRule(("networking.k8s.io",), ("networkpolicies",), (*READ, *WRITE)),
    # Each member's PodDisruptionBudget: evictions wait while it may serve (disruption.py).
    PolicyRule(("policy",), ("poddisruptionbudgets",), (*READ, *WRITE)),
    # The router-proxies' demand reports (read, never written): a service with spec.idleAfter
    # is scaled to zero when they say idle, and back when they hold a request (idle.py).
    PolicyRule(("coordination.k8s.io",), ("leases",), READ),
)

#: ModelPool controller: decides in its status (the grant), watches its members, their pods and
#: the pool's Lease, probes /slots. Members are read, never written: their user owns them. A pool
#: with a slot server owns that server's Deployment, Service and PodDisruptionBudget
#: (modelpool/slotserver.py), and deletes the server's pod on a node being emptied once nothing
#: is loaded in it (modelpool/slotruntime.py), so it reads the nodes.
MODEL_POOL_RULES = (
    PolicyRule((GROUP,), ("modelpools",), READ),
    PolicyRule((GROUP,), ("modelpools/status",), STATUS),
    PolicyRule((GROUP,), ("inferenceservices",), READ),
    PolicyRule(("apps",), ("deployments",), (*READ, *WRITE)),
    PolicyRule(("",), ("services",), (*READ, *WRITE)),
    PolicyRule(("",), ("pods",), (*READ, "delete")),
    PolicyRule(("",), ("nodes",), READ),
    PolicyRule(("policy",), ("poddisruptionbudgets",), (*READ, *WRITE)),
    PolicyRule(("discovery.k8s.io",), ("endpointslices",), READ),
    PolicyRule(("coordination.k8s.io",), ("leases",), READ),
)

#: Rules of the per-router activation Role the ModelRouter controller creates at run time. The
#: operator's ClusterRole must hold every one of them, or the API server refuses the Role.
ACTIVATION_ROLE_RULES = (
    # Members are read, never written: a proxy asks for a member through the pool's Lease only.
    PolicyRule((GROUP,), ("inferenceservices",), READ),
    PolicyRule(("coordination.k8s.io",), ("leases",), (*READ, *WRITE)),
    PolicyRule((GROUP,), ("modelpools",), READ),
)

#: ModelRouter controller: the proxy Deployment, Service, ServiceAccount, activation RBAC and
#: PodDisruptionBudget.
MODEL_ROUTER_RULES = (
    PolicyRule((GROUP,), ("modelrouters",), READ),
    PolicyRule((GROUP,), ("modelrouters/status",), STATUS),
    PolicyRule((GROUP,), ("modelrouters/finalizers",), ("update",)),
    PolicyRule(("apps",), ("deployments",), (*READ, *WRITE)),
    PolicyRule(("",), ("services", "serviceaccounts"), (*READ, *WRITE)),
    PolicyRule(("rbac.authorization.k8s.io",), ("roles", "rolebindings"), (*READ, *WRITE)),
    # The proxies' PodDisruptionBudget: a node drain evicts one replica at a time.
    PolicyRule(("policy",), ("poddisruptionbudgets",), (*READ, *WRITE)),
    # Backends are read (never written) for the BackendsReady condition.
    PolicyRule((GROUP,), ("inferenceservices", "modelpools"), READ),
)

#: The node cache's collection (controllers/modelcache): reads what names a cached file (every
#: InferenceService, member pods' fetch containers) and the Ready nodes, and creates one Job per
#: node. Its Jobs are never updated or deleted by it (``ttlSecondsAfterFinished`` removes them).
MODEL_CACHE_RULES = (
    PolicyRule((GROUP,), ("inferenceservices",), READ),
    PolicyRule(("",), ("pods",), READ),
    PolicyRule(("",), ("nodes",), READ),
    PolicyRule(("batch",), ("jobs",), (*READ, "create", "patch")),
)

#: Events, for every controller.
EVENT_RULES = (PolicyRule(("events.k8s.io",), ("events",), ("create", "patch")),)

#: What the operator's own code calls: the union of its controllers' needs.
OPERATOR_OWN_RULES = (
    *INFERENCE_SERVICE_RULES,
    *MODEL_POOL_RULES,
    *MODEL_ROUTER_RULES,
    *MODEL_CACHE_RULES,
    *EVENT_RULES,
)

#: What the operator holds only to grant it: the API server lets the ModelRouter controller write a
#: router's activation Role only if the operator holds every permission in it, and of those its
#: own code never writes Leases. Rendered as a rule of its own in the ClusterRole (not merged into
#: the pool controller's leases rule), so that an administrator who removes it stops the
#: activation of new routers (``ActivationRBAC``) while pools go on reconciling. Exactly the part
#: of ``ROUTER_PROXY_RULES`` that ``OPERATOR_OWN_RULES`` lacks (a unit test holds it to that).
PROXY_GRANT_RULES = (PolicyRule(("coordination.k8s.io",), ("leases",), WRITE),)

#: The operator's ClusterRole: its own needs and what it grants to router proxies.
OPERATOR_CLUSTER_RULES = (*OPERATOR_OWN_RULES, *PROXY_GRANT_RULES)

#: The operator's leader-election Role, in its own namespace only.
LEADER_ELECTION_RULES = (
    PolicyRule(("coordination.k8s.io",), ("leases",), (*READ, *WRITE)),
    *EVENT_RULES,
)

#: What a router-proxy replica needs in its own namespace: the activation Role, plus reading its
#: ModelRouter and the members' EndpointSlices (where it sends requests).
ROUTER_PROXY_RULES = (
    *ACTIVATION_ROLE_RULES,
    PolicyRule((GROUP,), ("modelrouters",), READ),
    PolicyRule(("discovery.k8s.io",), ("endpointslices",), READ),
)

#: The operator's cluster-wide needs by the controller that has them, for messages that say who
#: needs a missing permission. Together they are exactly :data:`OPERATOR_CLUSTER_RULES`.
OPERATOR_CLUSTER_RULES_BY_OWNER = {
    "InferenceService controller": INFERENCE_SERVICE_RULES,
    "ModelPool controller": MODEL_POOL_RULES,
    "ModelRouter controller": MODEL_ROUTER_RULES,
    "model cache collection": MODEL_CACHE_RULES,
    "event recorder": EVENT_RULES,
    "ModelRouter controller, to grant router proxies": PROXY_GRANT_RULES,
}

#: Roles the operator writes at run time, by what they are: each must be a subset of the
#: operator's ClusterRole, or the API server refuses it as an escalation.
RUNTIME_ROLE_RULES = {"per-router activation Role": ROUTER_PROXY_RULES}
