"""The node cache's collection: the operator runs ``controlplane collect-model-cache`` on each
node as a Job, with the paths every InferenceService names (docs/inferenceservice.md, "Model
weights").

* :mod:`~controlplane.controllers.modelcache.desired`: what to run, the named paths and the Job
  (pure);
* :mod:`~controlplane.controllers.modelcache.schedule`: when to run it (pure);
* :mod:`~controlplane.controllers.modelcache.reconciler`: reads the caches, creates the Jobs.
"""

from controlplane.controllers.modelcache.desired import CollectionSettings
from controlplane.controllers.modelcache.reconciler import (
    CONTROLLER_NAME,
    setup_model_cache_controller,
)

__all__ = ["CONTROLLER_NAME", "CollectionSettings", "setup_model_cache_controller"]
