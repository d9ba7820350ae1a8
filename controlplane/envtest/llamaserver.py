"""Finding the real llama.cpp ``llama-server`` and the llama.cpp source tree it was built from.

``hack/build-llama-server.sh`` builds the server from the llama.cpp tree that the
llama-cpp-python sdist ships, into the same version-keyed cache as the control-plane binaries,
with a ``src`` link beside the binary to that tree (the tiny-model generator reads its tokenizer
from the tree's vocab files). Nothing here builds or downloads: a missing binary is an error that
says how to build it, never a silent skip.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from controlplane.envtest.binaries import cache_root, find_executable
from controlplane.envtest.errors import BinaryNotFoundError

#: The llama-cpp-python release whose vendored llama.cpp ``hack/build-llama-server.sh`` builds
#: (kept in step with that script).
LLAMA_SERVER_VERSION: Final = "0.3.36"
#: The optimisation level that script compiles at by default (``LLAMA_SERVER_OPT``), part of its
#: cache folder's name.
LLAMA_SERVER_OPT: Final = "-O1"
#: An executable to use instead of the cached build.
LLAMA_SERVER_BINARY_VARIABLE: Final = "LLAMA_SERVER_BINARY"
#: A llama.cpp source tree to read vocab files from instead of the cached build's ``src``.
LLAMA_CPP_SOURCE_VARIABLE: Final = "LLAMA_CPP_SOURCE"
_BUILD_HINT: Final = "run `make llama-server` (hack/build-llama-server.sh builds it, ~4 min once)"


def cached_build_folder() -> Path:
    """Where ``hack/build-llama-server.sh`` puts the binary and its ``src`` link."""
    return cache_root() / "bin" / f"llama-server-{LLAMA_SERVER_VERSION}{LLAMA_SERVER_OPT}"


def find_llama_server() -> Path:
    """``$LLAMA_SERVER_BINARY``, else the cached build; raises :class:`BinaryNotFoundError`
    naming the command that builds it."""
    cached = cached_build_folder() / "llama-server"
    return find_executable(LLAMA_SERVER_BINARY_VARIABLE, cached, "llama-server binary", _BUILD_HINT)


def find_llama_cpp_source() -> Path:
    """The llama.cpp source tree: ``$LLAMA_CPP_SOURCE``, else the cached build's ``src`` link."""
    if explicit := os.environ.get(LLAMA_CPP_SOURCE_VARIABLE):
        path = Path(explicit)
        if (path / "models").is_dir():
            return path
        raise BinaryNotFoundError(
            f"{LLAMA_CPP_SOURCE_VARIABLE}={explicit} is not a llama.cpp tree (no models/ folder)"
        )
    path = cached_build_folder() / "src"
    if (path / "models").is_dir():
        return path
    raise BinaryNotFoundError(f"no llama.cpp source tree at {path}: {_BUILD_HINT}")


def find_vocab(name: str) -> Path:
    """``models/ggml-vocab-NAME.gguf`` of the llama.cpp tree (a vocab-only GGUF file)."""
    path = find_llama_cpp_source() / "models" / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        raise BinaryNotFoundError(f"no vocab file {path} in the llama.cpp tree")
    return path
