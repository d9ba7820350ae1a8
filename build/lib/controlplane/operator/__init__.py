"""The operator: one leader-elected manager running every controller, gated by the preflight.

- :mod:`~controlplane.operator.command`: ``controlplane operator``'s flags and exit codes;
- :mod:`~controlplane.operator.settings`: :class:`OperatorSettings`, every tunable;
- :mod:`~controlplane.operator.process`: :func:`build_manager` and :func:`run_operator`.

Only the settings are imported here: the process loads the controllers and the manager.
"""

from controlplane.operator.settings import LEADER_ELECTION_ID, OperatorSettings

__all__ = ["LEADER_ELECTION_ID", "OperatorSettings"]
