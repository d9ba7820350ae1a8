"""The slot's scheduler: pure policy, no I/O (docs/modelpool.md, "Scheduling the slot")."""
