"""Finding Prometheus's ``promtool`` and prometheus-operator's CRDs, the monitoring tests' tools.

``hack/build-prometheus.sh`` builds ``promtool`` (and the ``prometheus`` server beside it) from
the Prometheus Go module, and ``hack/fetch-prometheus-operator-crds.sh`` caches the CRDs of
ServiceMonitor, PodMonitor and PrometheusRule from prometheus-operator's Go module, both into the
same version-keyed cache as the control-plane binaries. Make runs them before pytest and passes
the paths in :data:`PROMTOOL_BINARY_VARIABLE` and :data:`PROMETHEUS_OPERATOR_CRDS_VARIABLE`.
Nothing here builds or downloads: a missing tool is an error that says how to get it, never a
silent skip. Under CI the variables themselves are required (:func:`find_promtool`), so a CI run
proves Make passed what it built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from controlplane.envtest.binaries import cache_root, find_executable
from controlplane.envtest.errors import BinaryNotFoundError

#: The Prometheus Go module version ``hack/build-prometheus.sh`` builds (kept in step with it).
PROMETHEUS_VERSION: Final = "v0.316.0"
#: The prometheus-operator version ``hack/fetch-prometheus-operator-crds.sh`` fetches.
PROMETHEUS_OPERATOR_VERSION: Final = "v0.94.1"
PROMTOOL_BINARY_VARIABLE: Final = "PROMTOOL_BINARY"
PROMETHEUS_OPERATOR_CRDS_VARIABLE: Final = "PROMETHEUS_OPERATOR_CRDS"
#: The CRDs the monitoring manifests use, as the module's file names spell them.
CRD_FILES: Final = tuple(
    f"monitoring.coreos.com_{plural}.yaml"
    for plural in ("servicemonitors", "podmonitors", "prometheusrules")
)


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this runs under CI (``.ci/run`` exports ``CI=true``)."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.lower() in ("1", "true", "yes")


def _required_in_ci(variable: str, hint: str) -> None:
    if in_ci() and not os.environ.get(variable):
        raise BinaryNotFoundError(
            f"CI=true but {variable} is not set: CI runs the tests through make, which {hint} "
            "and passes the path"
        )


def find_promtool() -> Path:
    """``$PROMTOOL_BINARY``, else the cached build of :data:`PROMETHEUS_VERSION`; raises
    :class:`BinaryNotFoundError` naming the command that builds it (and, under CI, when the
    variable is not set at all)."""
    _required_in_ci(PROMTOOL_BINARY_VARIABLE, "builds promtool (make promtool-bin)")
    cached = cache_root() / "bin" / f"prometheus-{PROMETHEUS_VERSION}" / "promtool"
    return find_executable(PROMTOOL_BINARY_VARIABLE, cached, "promtool", "run `make promtool-bin`")


def find_prometheus_operator_crds() -> list[Path]:
    """The CRD files of :data:`CRD_FILES`: from ``$PROMETHEUS_OPERATOR_CRDS``, else the cache;
    raises :class:`BinaryNotFoundError` naming the command that fetches them."""
    _required_in_ci(
        PROMETHEUS_OPERATOR_CRDS_VARIABLE, "fetches the CRDs (make prometheus-operator-crds)"
    )
    explicit = os.environ.get(PROMETHEUS_OPERATOR_CRDS_VARIABLE)
    folder = (
        Path(explicit)
        if explicit
        else cache_root() / "crds" / f"prometheus-operator-{PROMETHEUS_OPERATOR_VERSION}"
    )
    missing = [name for name in CRD_FILES if not (folder / name).is_file()]
    if missing:
        where = f"{PROMETHEUS_OPERATOR_CRDS_VARIABLE}={explicit}" if explicit else str(folder)
        raise BinaryNotFoundError(
            f"{where} lacks {', '.join(missing)}: run `make prometheus-operator-crds`"
        )
    return [folder / name for name in CRD_FILES]
