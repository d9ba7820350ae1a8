"""How the e2e tier is shared out among pytest-xdist workers (``make test-e2e`` runs it with
``-n E2E_WORKERS --dist loadgroup``; docs/testing.md says why and what it measured).

Each worker is a pytest session of its own, so it starts its own control plane (etcd,
kube-apiserver, kube-controller-manager) and its own Jaeger through the session fixtures: no test
sees another worker's objects, operators or Leases. What is decided here is only which worker runs
what:

* **a module is one unit of work.** Its tests share a module-scoped operator (the ``operator``
  fixture); handing them to several workers would start that operator once per worker. The
  modules whose tests each start their own processes and run for minutes (the storm, the fault
  plan: :data:`SPLIT_BY_TEST`) are split, a test a unit.
* **a named group is one unit** (``@pytest.mark.xdist_group("name")``), for tests that must not
  run beside each other.
* **the units that take minutes go out first** (:data:`LONGEST_FIRST`, then the units with the most
  tests), so the run does not end with one worker on a long module while the others are idle.

The test tiers that need no API server (unit, fuzz) do not use this.
"""

from __future__ import annotations

from typing import Any, Final

import pytest
from xdist.scheduler import LoadScopeScheduling

#: The modules that take longest, longest first, from ``--durations=0`` of a parallel run
#: (docs/testing.md, "Where the time goes"; ``hack/durations.py`` reads the table). Every other unit
#: follows, those with the most tests first. A name that matches nothing any more is harmless.
LONGEST_FIRST: Final[tuple[str, ...]] = (
    "tests/e2e/test_storm.py",
    "tests/e2e/test_faults.py",
    "tests/e2e/test_real_members.py",
    "tests/e2e/test_scheduling.py",
    "tests/e2e/test_llamacpp_contract.py",
    "tests/e2e/test_router_proxy.py",
    "tests/e2e/test_slot_server.py",
    "tests/e2e/test_budget.py",
    "tests/e2e/test_weights.py",
    "tests/e2e/test_standin_pods.py",
    "tests/e2e/test_api_validation.py",
    "tests/e2e/test_preflight_chaos.py",
    "tests/e2e/test_modelpool.py",
    "tests/e2e/test_leader_election.py",
)

#: Modules whose every test starts its own operator and processes (none takes the module-scoped
#: ``operator``) and runs for minutes: each test is a unit of its own, so one module's runs go to
#: several workers instead of one after another on one.
SPLIT_BY_TEST: Final[frozenset[str]] = frozenset(
    {"tests/e2e/test_storm.py", "tests/e2e/test_faults.py"}
)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its xdist group (``--dist loadgroup`` suffixes the node
    id with ``@group``), else the test itself in a :data:`SPLIT_BY_TEST` module, else its
    module."""
    group_at = nodeid.rfind("@")
    if group_at > nodeid.rfind("]"):  # an "@" inside parametrize ids is not a group
        return nodeid[group_at + 1 :]
    module = module_of(nodeid)
    return nodeid if module in SPLIT_BY_TEST else module


def rank(unit: str) -> int:
    """Where a unit goes in the queue: its module's place in :data:`LONGEST_FIRST`, the rest
    after."""
    module = module_of(unit)
    return LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)


class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
    """xdist's scope scheduling with a module (or a named group) as the scope, longest first."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self._ranked = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        # The base class fills ``workqueue`` (most tests first) and hands out its first units in
        # one call; the known-long units are moved to its front before the first is handed out.
        # The sort is stable: the rest keep the base class's order.
        if not self._ranked:
            ordered = sorted(self.workqueue.items(), key=lambda item: rank(item[0]))
            self.workqueue.clear()
            self.workqueue.update(ordered)
            self._ranked = True
        super()._assign_work_unit(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ModuleScheduling:
    return ModuleScheduling(config, log)
