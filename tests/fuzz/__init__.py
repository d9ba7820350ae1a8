"""Property-based fuzzing of the router-proxy: client bytes in, member answers out.

What is fuzzed, the oracles and how to run them: docs/fuzzing.md.
"""
