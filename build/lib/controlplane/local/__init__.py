"""What ``make demo`` and ``make dev`` start and stop: the whole system on this machine.

:mod:`.system` holds the processes (the operator under its ServiceAccount, the node stand-in,
router-proxies) and the two scripts that run them; :mod:`.command` is their command line
(``controlplane demo``, ``controlplane dev``). The e2e tests start the same processes.
"""
