"""The work queue of the controller framework, in client-go's three layers.

* :mod:`.queue`: dedupe, one worker per key, FIFO, shut-down with drain.
* :mod:`.delaying`: ``add_after``, a key only ever moving earlier.
* :mod:`.ratelimiting` with :mod:`.ratelimiters`: per-key backoff and an overall token bucket.

Each layer is a class that adds one concern to the one below and a Protocol naming what it
offers, so a controller can depend on :class:`RateLimitingWorkQueue` and a test can hand it
anything that behaves like one. Time comes from an injectable :class:`Clock`; metrics go to an
injectable :class:`MetricsProvider` (the Prometheus one lives in ``controlplane.runtime.metrics``).
"""

from controlplane.runtime.workqueue.clock import Clock, FakeClock, SystemClock
from controlplane.runtime.workqueue.delaying import DelayingQueue, DelayingWorkQueue
from controlplane.runtime.workqueue.errors import NotProcessing, QueueShutDown, WorkqueueError
from controlplane.runtime.workqueue.metrics import (
    InFlightProbe,
    MetricsProvider,
    NoopMetricsProvider,
    UnfinishedWork,
)
from controlplane.runtime.workqueue.queue import Queue, WorkQueue
from controlplane.runtime.workqueue.ratelimiters import (
    DEFAULT_BUCKET_BURST,
    DEFAULT_BUCKET_QPS,
    DEFAULT_ITEM_BASE_DELAY,
    DEFAULT_ITEM_MAX_DELAY,
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from controlplane.runtime.workqueue.ratelimiting import RateLimitingQueue, RateLimitingWorkQueue

__all__ = [
    "DEFAULT_BUCKET_BURST",
    "DEFAULT_BUCKET_QPS",
    "DEFAULT_ITEM_BASE_DELAY",
    "DEFAULT_ITEM_MAX_DELAY",
    "BucketRateLimiter",
    "Clock",
    "DelayingQueue",
    "DelayingWorkQueue",
    "FakeClock",
    "InFlightProbe",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "MetricsProvider",
    "NoopMetricsProvider",
    "NotProcessing",
    "Queue",
    "QueueShutDown",
    "RateLimiter",
    "RateLimitingQueue",
    "RateLimitingWorkQueue",
    "SystemClock",
    "UnfinishedWork",
    "WorkQueue",
    "WorkqueueError",
    "default_controller_rate_limiter",
]
