"""Finding promtool and prometheus-operator's CRDs: what Make built, else a clear failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.envtest.errors import BinaryNotFoundError
from controlplane.envtest.prometheus import (
    CRD_FILES,
    PROMETHEUS_OPERATOR_VERSION,
    PROMETHEUS_VERSION,
    find_prometheus_operator_crds,
    find_promtool,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in ("CI", "PROMTOOL_BINARY", "PROMETHEUS_OPERATOR_CRDS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CONTROLPLANE_CACHE", str(tmp_path / "cache"))


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_promtool_is_the_variables_else_the_cached_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(BinaryNotFoundError, match="run `make promtool-bin`"):
        find_promtool()
    cached = executable(
        tmp_path / "cache" / "bin" / f"prometheus-{PROMETHEUS_VERSION}" / "promtool"
    )
    assert find_promtool() == cached
    mine = executable(tmp_path / "mine" / "promtool")
    monkeypatch.setenv("PROMTOOL_BINARY", str(mine))
    assert find_promtool() == mine
    monkeypatch.setenv("PROMTOOL_BINARY", str(tmp_path / "nothing"))
    with pytest.raises(BinaryNotFoundError, match=r"PROMTOOL_BINARY=.* is not an executable"):
        find_promtool()


def test_under_ci_the_variables_are_required_even_with_a_cached_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    executable(tmp_path / "cache" / "bin" / f"prometheus-{PROMETHEUS_VERSION}" / "promtool")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(BinaryNotFoundError, match="CI=true but PROMTOOL_BINARY is not set"):
        find_promtool()
    with pytest.raises(BinaryNotFoundError, match="CI=true but PROMETHEUS_OPERATOR_CRDS"):
        find_prometheus_operator_crds()


def test_the_crds_must_all_be_there(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = tmp_path / "cache" / "crds" / f"prometheus-operator-{PROMETHEUS_OPERATOR_VERSION}"
    folder.mkdir(parents=True)
    (folder / CRD_FILES[0]).write_text("kind: CustomResourceDefinition\n")
    with pytest.raises(BinaryNotFoundError, match=r"lacks monitoring\.coreos\.com_podmonitors"):
        find_prometheus_operator_crds()
    for name in CRD_FILES:
        (folder / name).write_text("kind: CustomResourceDefinition\n")
    assert find_prometheus_operator_crds() == [folder / name for name in CRD_FILES]
    monkeypatch.setenv("PROMETHEUS_OPERATOR_CRDS", str(tmp_path / "elsewhere"))
    with pytest.raises(BinaryNotFoundError, match=r"PROMETHEUS_OPERATOR_CRDS=.*elsewhere lacks"):
        find_prometheus_operator_crds()
