"""The image built here (hack/build-image.sh, no registry) and the Dockerfile (for a Docker that
reaches one) must run the same way: the same entrypoint, default command, user, ports and Python
settings, and both install the project itself (so the same pinned dependencies) and nothing else.

Parsed from both files, so a change to one that the other does not follow fails here."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
BUILD_SCRIPT = ROOT / "hack" / "build-image.sh"


def _record(config: dict[str, object], word: str, rest: str) -> None:
    """One instruction (``USER 65532:65532``, ``ENV A=1 B=2``, ...) into ``config``."""
    if word in ("USER", "EXPOSE", "WORKDIR"):
        config[word] = rest.split()
    elif word in ("ENTRYPOINT", "CMD"):
        config[word] = json.loads(rest)
    elif word == "ENV":
        env = config.setdefault("ENV", {})
        assert isinstance(env, dict)
        env.update(item.partition("=")[::2] for item in shlex.split(rest))


def dockerfile_config() -> dict[str, object]:
    """The Dockerfile's runtime instructions, continuation lines joined (the last one wins)."""
    config: dict[str, object] = {}
    for line in re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text()).splitlines():
        word, _, rest = line.strip().partition(" ")
        _record(config, word, rest)
    return config


def build_script_config() -> dict[str, object]:
    """The build script's ``docker import -c`` changes."""
    config: dict[str, object] = {}
    for _, change in re.findall(r"-c\s+(['\"])(.*?)\1", BUILD_SCRIPT.read_text()):
        word, _, rest = change.replace("$UID_GID", "65532").partition(" ")
        _record(config, word, rest)
    return config


def test_both_images_run_the_console_script_as_the_same_non_root_user() -> None:
    built, docker = build_script_config(), dockerfile_config()
    for word in ("ENTRYPOINT", "CMD", "USER", "EXPOSE", "WORKDIR"):
        assert built[word] == docker[word], word
    assert built["USER"] == ["65532:65532"]
    assert built["ENTRYPOINT"] == ["controlplane"]


def test_both_images_set_the_same_python_runtime_settings() -> None:
    built_env, docker_env = build_script_config()["ENV"], dockerfile_config()["ENV"]
    assert isinstance(built_env, dict)
    assert isinstance(docker_env, dict)
    runtime = {"PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"}
    assert {k: built_env[k] for k in runtime} == {k: docker_env[k] for k in runtime}


def test_both_install_the_project_and_only_the_project() -> None:
    installs = re.findall(r"pip install (.*)", DOCKERFILE.read_text())
    assert [i.split("\\")[0].strip() for i in installs] == ["."]
    script = BUILD_SCRIPT.read_text()
    assert re.search(r"-m pip wheel [^\n]*--wheel-dir \"\$work/wheels\" \. ", script)
    assert re.search(r"--find-links /tmp/wheels modelpool-controlplane", script)
