"""Demand reports: how each router-proxy replica tells the pool what it holds (docs/modelpool.md).

The pool's scheduler (:mod:`controlplane.scheduling.policy`) decides on the demand of *every*
replica, not only its own, so each replica publishes a summary of its demand per pool, and every
replica and the pool controller read all of them. The report **is** a Lease, one per replica and
pool, which keeps the properties the scheduler needs without a new kind:

* named :func:`demand_lease_name` (``modelpool-demand-<pool>-<hash of the replica>``) in the pool's
  namespace, labelled :data:`~controlplane.api.v1alpha1.activation.POOL_LABEL` ``= <pool>`` and
  :data:`REPORT_LABEL` ``= demand`` (so the Lease informers both sides already run see it, and it
  is never read as the pool's intent, whose name differs);
* ``spec.holderIdentity`` is the replica; the replica renews it at a third of
  ``leaseDurationSeconds`` while it has demand, so a replica that dies stops counting within one
  duration, and nobody else's demand goes with it;
* the annotation :data:`DEMAND_ANNOTATION` carries ``{"<member>": {"held": N, "waited": S,
  "active": B}}``: requests held, how long the oldest of them had waited when the report was
  written (a *duration*: readers place the arrival on their own clock, at the moment they saw the
  report, so no instant crosses machines), and whether a request for the member is in flight or
  ended a moment ago;
* the annotation :data:`ADMISSION_ANNOTATION` carries the replica's **acknowledgement of the
  pool's closed admission** (the fenced drain, docs/design.md): ``{"generation": G, "inFlight":
  {"<member>": N}}``, the pool's ``status.admissionGeneration`` this replica has applied (every
  admission decision it makes from then on reads that status's ``admissionClosed``) and the
  requests it still has in flight on each closed member. The pool probes a closed member's
  ``/slots`` only once every live report acknowledges its generation with nothing in flight on
  it, so no request can still be on its way from a replica whose cache lags.

A replica that routes a pool keeps its report held (renewed at a third of its duration) for as long
as it routes it, demand or not: the pool's drain must know every replica that might forward to a
member. It writes the report when its demand summary changes (at most once per report interval,
never per request) and at once when its acknowledgement changes; it empties it (no holder) when it
stops routing the pool, or on its way out once nothing is in flight.

Both sides import these names, the builders and the one parsing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from controlplane.api.v1alpha1.activation import POOL_LABEL
from controlplane.runtime.leaserecord import ExpiryObserver, LeaseRecord, lease_key
from controlplane.runtime.objects import Object
from controlplane.runtime.timeutil import micro_time

#: Label on a demand report (beside the pool label) saying what the Lease is.
REPORT_LABEL: Final = "inference.modelpool.dev/report"
REPORT_DEMAND: Final = "demand"
#: Annotation holding the report's JSON.
DEMAND_ANNOTATION: Final = "inference.modelpool.dev/demand"
#: Annotation holding the replica's acknowledgement of the pool's closed admission.
ADMISSION_ANNOTATION: Final = "inference.modelpool.dev/admission"
DEMAND_LEASE_PREFIX: Final = "modelpool-demand-"
#: The report key under which a replica reports its demand for InferenceServices no pool lists
#: that scale to zero (``spec.idleAfter``), in place of a pool's name: a pool's name is a DNS label
#: and cannot contain a dot, so no pool's reports are ever read as these.
STANDALONE_REPORTS: Final = "isvc.standalone"
#: Members one report may name; a longer one is refused as malformed (a pool has at most 32).
MAX_REPORTED_MEMBERS: Final = 64
#: Held requests one report may claim for a member; beyond it the report is malformed.
MAX_REPORTED_HELD: Final = 1_000_000


def demand_lease_name(pool: str, identity: str) -> str:
    """The Lease carrying ``identity``'s demand for ``pool`` (a hash keeps it a valid name)."""
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    return f"{DEMAND_LEASE_PREFIX}{pool}-{digest}"


def pool_of_demand_lease(lease: Mapping[str, Any]) -> str | None:
    """The pool whose demand ``lease`` reports, or None for any other Lease."""
    meta = lease.get("metadata") or {}
    labels = meta.get("labels") or {}
    pool = labels.get(POOL_LABEL)
    if not pool or labels.get(REPORT_LABEL) != REPORT_DEMAND:
        return None
    if not str(meta.get("name") or "").startswith(f"{DEMAND_LEASE_PREFIX}{pool}-"):
        return None
    return str(pool)


@dataclass(frozen=True, slots=True)
class ReportedDemand:
    """One replica's demand for one member, as written in its report."""

    held: int = 0
    waited: float = 0.0
    active: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"held": self.held, "waited": round(self.waited, 3), "active": self.active}


class MalformedReport(ValueError):
    """A demand annotation that is not the documented shape; the message names what is wrong."""


@dataclass(frozen=True, slots=True)
class AdmissionAck:
    """A replica's acknowledgement of the pool's closed admission: the pool status's
    ``admissionGeneration`` it has applied, and its requests in flight on each closed member
    (members with none are left out)."""

    generation: int = 0
    in_flight: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        busy = {m: n for m, n in sorted(self.in_flight.items()) if n > 0}
        return {"generation": self.generation, "inFlight": busy}

    def acknowledges(self, generation: int, member: str) -> bool:
        """Admission to ``member`` closed at ``generation`` is applied here, nothing in flight."""
        return self.generation >= generation and self.in_flight.get(member, 0) == 0


def _json_object(annotation: str, text: str, what: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object, or :class:`MalformedReport` naming ``annotation``."""
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise MalformedReport(f"{annotation} is not JSON: {err}") from err
    if not isinstance(raw, dict):
        raise MalformedReport(f"{annotation} must be {what}")
    return raw


def encode_admission(ack: AdmissionAck) -> str:
    return json.dumps(ack.to_json(), separators=(",", ":"))


def decode_admission(text: str | None) -> AdmissionAck | None:
    """The one parsing of an acknowledgement (None: the report carries none, as an older
    replica's); raises :class:`MalformedReport` naming the problem."""
    if text is None:
        return None
    raw = _json_object(ADMISSION_ANNOTATION, text, "an object")
    generation, in_flight = raw.get("generation"), raw.get("inFlight", {})
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise MalformedReport(f"{ADMISSION_ANNOTATION}.generation must be an integer >= 0")
    if not isinstance(in_flight, dict) or len(in_flight) > MAX_REPORTED_MEMBERS:
        raise MalformedReport(f"{ADMISSION_ANNOTATION}.inFlight must be an object of members")
    counts: dict[str, int] = {}
    for member, count in in_flight.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise MalformedReport(f"{ADMISSION_ANNOTATION}.inFlight[{member!r}] must be >= 0")
        counts[str(member)] = count
    return AdmissionAck(generation, counts)


def encode_demand(demand: Mapping[str, ReportedDemand]) -> str:
    return json.dumps({m: d.to_json() for m, d in sorted(demand.items())}, separators=(",", ":"))


def decode_demand(text: str | None) -> dict[str, ReportedDemand]:
    """The one parsing of a report; raises :class:`MalformedReport` naming the problem."""
    if not text:
        return {}
    raw = _json_object(DEMAND_ANNOTATION, text, "an object of members")
    if len(raw) > MAX_REPORTED_MEMBERS:
        raise MalformedReport(f"{DEMAND_ANNOTATION} names {len(raw)} members (at most 64)")
    found: dict[str, ReportedDemand] = {}
    for member, entry in raw.items():
        if not isinstance(entry, dict):
            raise MalformedReport(f"{DEMAND_ANNOTATION}[{member!r}] must be an object")
        held, waited, active = entry.get("held", 0), entry.get("waited", 0), entry.get("active")
        if (
            isinstance(held, bool)
            or not isinstance(held, int)
            or not 0 <= held <= MAX_REPORTED_HELD
        ):
            raise MalformedReport(f"{DEMAND_ANNOTATION}[{member!r}].held must be 0..1000000")
        if isinstance(waited, bool) or not isinstance(waited, int | float) or not waited >= 0:
            raise MalformedReport(f"{DEMAND_ANNOTATION}[{member!r}].waited must be >= 0 seconds")
        if not isinstance(active, bool):
            raise MalformedReport(f"{DEMAND_ANNOTATION}[{member!r}].active must be a boolean")
        found[str(member)] = ReportedDemand(held, float(waited), active)
    return found


def demand_lease(
    namespace: str,
    pool: str,
    identity: str,
    duration: int,
    demand: Mapping[str, ReportedDemand],
    current: Mapping[str, Any] | None = None,
    admission: AdmissionAck | None = None,
) -> Object:
    """The report Lease carrying ``demand`` and ``admission``, held by ``identity`` while it
    routes the pool (``admission`` given) or has demand, with no holder otherwise; written over
    ``current`` (as read: its resourceVersion) if given."""
    now = micro_time()
    base: Object = dict(current) if current is not None else {}
    metadata = dict(base.get("metadata") or {})
    metadata.update(name=demand_lease_name(pool, identity), namespace=namespace)
    metadata["labels"] = {
        **(metadata.get("labels") or {}),
        POOL_LABEL: pool,
        REPORT_LABEL: REPORT_DEMAND,
    }
    annotations = {**(metadata.get("annotations") or {}), DEMAND_ANNOTATION: encode_demand(demand)}
    annotations.pop(ADMISSION_ANNOTATION, None)
    if admission is not None:
        annotations[ADMISSION_ANNOTATION] = encode_admission(admission)
    metadata["annotations"] = annotations
    spec = dict(base.get("spec") or {})
    spec.update(
        holderIdentity=identity if demand or admission is not None else "",
        leaseDurationSeconds=duration,
        renewTime=now,
    )
    spec.setdefault("acquireTime", now)
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **base,
            "metadata": metadata, "spec": spec}  # fmt: skip


@dataclass(frozen=True, slots=True)
class LiveReport:
    """One replica's live report: who, when the reader saw its record (the reader's clock), its
    demand, and its acknowledgement of the pool's closed admission (None: it carries none)."""

    holder: str
    seen_at: float
    demand: dict[str, ReportedDemand]
    admission: AdmissionAck | None = None


def live_reports(
    leases: Iterable[Mapping[str, Any]],
    pool: str,
    expiry: ExpiryObserver,
    *,
    skip_holder: str = "",
    on_malformed: Callable[[str, str], None] = lambda key, why: None,
) -> list[LiveReport]:
    """The held, unexpired (judged by ``expiry``, the reader's clock), well-formed demand reports
    of ``pool`` among ``leases``; a malformed one is passed to ``on_malformed(key, why)`` and
    left out. Both readers (every proxy replica and the pool controller) call this one."""
    found: list[LiveReport] = []
    for lease in leases:
        if pool_of_demand_lease(lease) != pool:
            continue
        record = LeaseRecord.of(lease)
        if not record.held or record.holder == skip_holder or expiry.remaining(lease) < 0:
            continue
        annotations = dict(record.annotations)
        try:
            demand = decode_demand(annotations.get(DEMAND_ANNOTATION))
        except MalformedReport as err:
            on_malformed(lease_key(lease), str(err))
            continue
        try:
            admission = decode_admission(annotations.get(ADMISSION_ANNOTATION))
        except MalformedReport as err:
            # Its demand still counts; it acknowledges nothing, so it holds every fenced drain
            # until it is mended or expires (never a drain on a guess).
            on_malformed(lease_key(lease), str(err))
            admission = None
        found.append(LiveReport(record.holder, expiry.observe(lease), demand, admission))
    return found
