"""The operator's RBAC manifests: rendered from the declared rules, and checked against them.

:mod:`~controlplane.rbacmanifests.render` writes ``manifests/rbac/`` from
:mod:`controlplane.controllers.rbac`; :mod:`~controlplane.rbacmanifests.check` reads whatever
manifests a user will install and proves the operator's ClusterRole holds every declared need and
nothing more, that the Roles the operator writes at run time are within it (or the API server
refuses them as escalations), and that no manifest grants a wildcard.
"""
