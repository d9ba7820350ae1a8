"""The node cache's collection: which downloaded weights leave a node's disk, and their removal.

The fetcher (:mod:`controlplane.modelfetch`) only ever adds to the node cache; this package takes
away what no InferenceService names any more. Split so that the decision can be tested without a
disk:

* :mod:`~controlplane.modelcache.rule`: the pure rule (entries, the named paths, ``now``, a
  retention and a size cap in; the entries to remove out);
* :mod:`~controlplane.modelcache.disk`: the cache as it is on disk: listing its entries and
  removing one under the fetcher's lock;
* :mod:`~controlplane.modelcache.command`: ``controlplane collect-model-cache``, which the
  operator runs on each node as a Job (:mod:`controlplane.controllers.modelcache`).
"""
