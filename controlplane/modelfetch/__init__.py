"""``controlplane fetch-model``: a model's weights downloaded into the node's cache, verified.

The fetch container of an InferenceService (its prefetch Job, then its member pod's init
container) runs this with the operator's own image: ``https://``/``http://`` sources through
``httpx`` (:mod:`.https`), ``hf://`` sources through ``huggingface_hub`` (:mod:`.hub`), both
under one file lock per cache entry so that two pods of one node never download the same file
twice. A verified file gets a marker (:mod:`.marker`); a later run that finds it exits at once,
which is what a member's start costs once the node has the file.

The operator reads what a run says through the pod's log: one JSON record per line
(:mod:`.progress`, the only module of this package it imports) and, on failure, the
termination message ``REASON: message`` (:mod:`.errors`).

Nothing here is imported by ``controlplane/__init__`` or the other subcommands: ``huggingface_hub``
is imported by :mod:`.hub` alone, ``httpx`` by :mod:`.https` alone, and the command imports each
only when a download is needed.
"""
