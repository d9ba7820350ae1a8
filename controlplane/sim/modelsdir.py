"""Router mode's pure parts: which models a ``--models-dir`` holds, and what a load may do.

Why pure: the simulator's router (:mod:`controlplane.sim.router`) must decide exactly as
llama-server's router does (``tools/server/server-models.cpp``), and those decisions (a model's
name, which idle model gives way at ``--models-max``, when the limit is an error) are tested here
without a process.

* **The models** (llama.cpp's ``load_from_models_dir``): each ``*.gguf`` file directly in the
  folder is a model named by the file name without ``.gguf``; each sub-folder holding a ``.gguf``
  is a model named by the folder. Multimodal projectors (a name containing ``mmproj``) and draft
  models (``mtp-``, ``dspark-``, ``dflash-`` prefixes) are companions, never models of their own.
  Symbolic links are followed, as ``std::filesystem::is_regular_file`` does. The list is sorted by
  name (the router keeps its models in a ``std::map``).
* **A load at the limit**: when ``--models-max`` (0: no limit) models are running (loading or
  loaded), the least recently used *loaded* model with no request in flight is unloaded first;
  when there is none (every one busy or still loading), the load fails with
  :data:`LIMIT_REACHED`, which llama-server answers as a 500 ``server_error``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: llama-server's ``--models-max`` default (``common_params::models_max``).
DEFAULT_MODELS_MAX: Final = 4
MODEL_SUFFIX: Final = ".gguf"
#: File name prefixes of draft models, which ride along with a model rather than being one.
DRAFT_PREFIXES: Final = ("mtp-", "dspark-", "dflash-")
#: The load that finds no model to give way (``server_models::load``).
LIMIT_REACHED: Final = "model limit reached, try again later"


class ModelStatus(enum.Enum):
    """A model's ``status.value`` in ``GET /models`` (the states router mode reaches here)."""

    UNLOADED = "unloaded"
    LOADING = "loading"
    LOADED = "loaded"

    @property
    def running(self) -> bool:
        """Loading or loaded: it holds one of the ``--models-max`` places."""
        return self is not ModelStatus.UNLOADED


def is_companion(file_name: str) -> bool:
    """A projector or draft file: part of a model, not a model."""
    return "mmproj" in file_name or file_name.startswith(DRAFT_PREFIXES)


def model_name(file_name: str) -> str:
    """``tiny-a.gguf`` -> ``tiny-a`` (every ``.gguf`` removed, as llama.cpp's replace-all does)."""
    return file_name.replace(MODEL_SUFFIX, "")


def _folder_model(folder: Path) -> Path | None:
    """The model file of a sub-folder: the first shard of a split model, else its one GGUF."""
    chosen: Path | None = None
    for entry in sorted(folder.iterdir()):
        name = entry.name
        if not name.endswith(MODEL_SUFFIX) or not entry.is_file() or is_companion(name):
            continue
        if "-00001-of-" in name:
            return entry
        chosen = entry
    return chosen


def scan_models_dir(folder: Path) -> dict[str, Path]:
    """The models of a ``--models-dir``, name to model file, sorted by name."""
    if not folder.is_dir():
        raise ValueError(f"error: '{folder}' does not exist or is not a directory")
    found: dict[str, Path] = {}
    for entry in folder.iterdir():
        if entry.is_dir():
            if (model := _folder_model(entry)) is not None:
                found[entry.name] = model
        elif entry.is_file() and entry.name.endswith(MODEL_SUFFIX) and not is_companion(entry.name):
            found[model_name(entry.name)] = entry
    return dict(sorted(found.items()))


@dataclass(frozen=True, slots=True)
class ModelUse:
    """What the limit reads of a model: its status, when it was last used, requests in flight."""

    status: ModelStatus
    last_used: float = 0.0
    in_flight: int = 0
    stopping: bool = False


def has_capacity(models: Mapping[str, ModelUse], models_max: int) -> bool:
    """Whether one more model may run (``models_max`` 0 is no limit)."""
    running = sum(1 for use in models.values() if use.status.running)
    return models_max <= 0 or running < models_max


def pick_victim(models: Mapping[str, ModelUse]) -> str | None:
    """The model to unload so another may load: the least recently used of the loaded ones with
    no request in flight and not already stopping; None when there is none."""
    idle = [
        (use.last_used, name)
        for name, use in models.items()
        if use.status is ModelStatus.LOADED and not use.in_flight and not use.stopping
    ]
    return min(idle)[1] if idle else None
