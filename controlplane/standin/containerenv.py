"""A container's environment, resolved as a kubelet resolves it.

Before each start of a container a kubelet reads the Secrets and ConfigMaps its ``env`` and
``envFrom`` name and builds the environment: ``envFrom`` sources first, in order (each key with
the source's ``prefix``), then ``env`` in order, each overriding what came before. A ``value``
may refer to earlier variables as ``$(NAME)`` (``$$`` escapes a ``$``); so may the container's
``command`` and ``args`` (:func:`expand_args`). ``valueFrom`` reads a ``secretKeyRef``, a
``configMapKeyRef``, or a ``fieldRef`` of the pod (``metadata.name``, ``metadata.namespace``,
``metadata.uid``, ``metadata.labels['K']``, ``metadata.annotations['K']``, ``spec.nodeName``,
``spec.serviceAccountName``, ``status.podIP``, ``status.hostIP``); ``resourceFieldRef`` is not
played (no variable). A missing Secret, ConfigMap or key that is not ``optional`` stops the
container from starting: :class:`EnvError`, whose message is the kubelet's, and which the
stand-in reports as the container's ``CreateContainerConfigError``.

The environment is added to the stand-in's own (a process needs ``PATH`` and ``HOME``, which an
image would give): :func:`read_env` returns only the container's variables. The resolution
(:func:`resolve_env`) is pure; :func:`read_env` fetches what it refers to.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import CONFIGMAPS, SECRETS

SECRET: Final = "Secret"
CONFIG_MAP: Final = "ConfigMap"
#: A source of variables: its kind and name.
Source = tuple[str, str]
_FIELD: Final = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]")
_REFERENCE: Final = re.compile(r"\$\$|\$\(([^)]*)\)")


class EnvError(Exception):
    """A referenced Secret, ConfigMap or key is missing (the kubelet's message)."""


def sources_of(container: Mapping[str, Any]) -> set[Source]:
    """The Secrets and ConfigMaps the container's environment refers to."""
    found: set[Source] = set()
    for source in container.get("envFrom") or ():
        if ref := source.get("secretRef"):
            found.add((SECRET, str(ref.get("name"))))
        if ref := source.get("configMapRef"):
            found.add((CONFIG_MAP, str(ref.get("name"))))
    for var in container.get("env") or ():
        value_from = var.get("valueFrom") or {}
        if ref := value_from.get("secretKeyRef"):
            found.add((SECRET, str(ref.get("name"))))
        if ref := value_from.get("configMapKeyRef"):
            found.add((CONFIG_MAP, str(ref.get("name"))))
    return found


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(NAME)`` replaced by ``env[NAME]`` when defined (left as it is otherwise), ``$$`` by
    ``$``: the kubelet's expansion."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(replace, text)


def expand_args(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """A container's ``command`` or ``args`` with ``$(NAME)`` expanded from its environment."""
    return [expand(str(arg), env) for arg in args]


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """A ``fieldRef``'s value: the pod's field at ``path`` (empty when unset)."""
    meta = pod.get("metadata") or {}
    if match := _FIELD.fullmatch(path):
        return str((meta.get(match.group(1)) or {}).get(match.group(2)) or "")
    section, _, field = path.partition(".")
    holder = {"metadata": meta, "spec": pod.get("spec") or {}, "status": pod.get("status") or {}}
    if field == "serviceAccountName" and section == "spec":
        return str(holder["spec"].get("serviceAccountName") or "default")
    return str((holder.get(section) or {}).get(field) or "")


def _missing(kind: str, name: str) -> EnvError:
    return EnvError(f'{kind.lower()} "{name}" not found')


def _value_from(
    pod: Mapping[str, Any],
    value_from: Mapping[str, Any],
    data: Mapping[Source, Mapping[str, str] | None],
) -> str | None:
    """A ``valueFrom``'s value; None for an optional one that is missing (no variable)."""
    namespace = pod["metadata"].get("namespace")
    for kind, key_name in ((SECRET, "secretKeyRef"), (CONFIG_MAP, "configMapKeyRef")):
        ref = value_from.get(key_name)
        if not ref:
            continue
        name, key, optional = str(ref.get("name")), str(ref.get("key")), bool(ref.get("optional"))
        values = data.get((kind, name))
        if values is None:
            if optional:
                return None
            raise _missing(kind, name)
        if key not in values:
            if optional:
                return None
            raise EnvError(f"couldn't find key {key} in {kind} {namespace}/{name}")
        return values[key]
    if ref := value_from.get("fieldRef"):
        return field_value(pod, str(ref.get("fieldPath") or ""))
    return None  # resourceFieldRef and others: not played


def resolve_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    data: Mapping[Source, Mapping[str, str] | None],
) -> dict[str, str]:
    """The container's variables, from the contents of its sources (``data``: decoded values
    by source, None for one that does not exist); raises :class:`EnvError`."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or ():
        prefix = str(source.get("prefix") or "")
        for kind, key_name in ((SECRET, "secretRef"), (CONFIG_MAP, "configMapRef")):
            ref = source.get(key_name)
            if not ref:
                continue
            values = data.get((kind, str(ref.get("name"))))
            if values is None:
                if ref.get("optional"):
                    continue
                raise _missing(kind, str(ref.get("name")))
            for key, value in values.items():
                if "=" not in key:  # a kubelet skips keys that cannot be variable names
                    env[prefix + key] = value
    for var in container.get("env") or ():
        name = str(var.get("name"))
        if "valueFrom" in var:
            found = _value_from(pod, var.get("valueFrom") or {}, data)
            if found is not None:
                env[name] = found
        else:
            env[name] = expand(str(var.get("value") or ""), env)
    return env


def decoded(obj: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's or ConfigMap's values as text (Secret ``data`` and ``binaryData`` are base64)."""
    values: dict[str, str] = {}
    secret = obj.get("kind") == SECRET
    for key, value in (obj.get("data") or {}).items():
        values[key] = base64.b64decode(value).decode(errors="replace") if secret else str(value)
    for key, value in (obj.get("binaryData") or {}).items():
        values[key] = base64.b64decode(value).decode(errors="replace")
    for key, value in (obj.get("stringData") or {}).items():  # never stored; harmless
        values[key] = str(value)
    return values


async def read_env(
    client: KubeClient, pod: Mapping[str, Any], container: Mapping[str, Any]
) -> dict[str, str]:
    """Fetch the container's Secrets and ConfigMaps and resolve its variables."""
    namespace = pod["metadata"]["namespace"]
    data: dict[Source, Mapping[str, str] | None] = {}
    for kind, name in sources_of(container):
        resource = SECRETS if kind == SECRET else CONFIGMAPS
        try:
            data[(kind, name)] = decoded(await client.get(resource, name, namespace))
        except NotFound:
            data[(kind, name)] = None
    return resolve_env(pod, container, data)
