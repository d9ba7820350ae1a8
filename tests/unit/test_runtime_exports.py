"""The framework's public face: ``controlplane.runtime`` exports what a controller author uses."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import controlplane.runtime as runtime


@pytest.mark.parametrize("name", runtime.__all__)
def test_every_export_is_the_defining_module_s_object(name: str) -> None:
    module = importlib.import_module(runtime._EXPORTS[name])
    assert getattr(runtime, name) is getattr(module, name)


def test_the_author_s_names_are_there() -> None:
    for name in ("Manager", "Controller", "Request", "Result", "TerminalError", "Informer"):
        assert name in runtime.__all__
    for name in ("KubeClient", "NotFound", "Conflict", "ApiError", "Object", "Clock"):
        assert name in runtime.__all__


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Manger'"):
        _ = runtime.Manger


def test_importing_a_submodule_does_not_load_the_whole_framework() -> None:
    code = (
        "import sys, controlplane.runtime.logs; "
        "assert 'controlplane.runtime.manager' not in sys.modules, 'manager loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_package_imports_first_without_a_cycle() -> None:
    code = "from controlplane.runtime import Manager, Request, KubeClient, ResourceMapper"
    subprocess.run([sys.executable, "-c", code], check=True)
