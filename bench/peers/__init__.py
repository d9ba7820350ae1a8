"""Peers of the controller benchmark: each is a process speaking the protocol in bench/README.md."""
