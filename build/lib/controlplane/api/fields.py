"""How an API field is declared: its JSON name and the OpenAPI constraints the server enforces.

A field's constraints live on the dataclass field itself (``dataclasses.field(metadata=...)``), and
rules that span fields (CEL, ``x-kubernetes-validations``) live on the class (``RULES``, see
:class:`controlplane.api.struct.ApiObject`). Keeping both beside
the Python attribute is what makes the type the single source of its schema: nothing else says
what a field may hold.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

#: Key of a field's :class:`FieldSpec` in ``dataclasses.Field.metadata``.
METADATA_KEY: Final = "controlplane.api"

ListType = Literal["atomic", "set", "map"]


@dataclass(frozen=True, slots=True)
class Rule:
    """One CEL rule (``x-kubernetes-validations``) with the message ``kubectl`` will show.

    ``field_path`` points the error at a child field (``.default``) so the message names the field
    the user must fix, not the object that holds it.
    """

    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    def to_openapi(self) -> dict[str, Any]:
        rendered: dict[str, Any] = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            rendered["fieldPath"] = self.field_path
        if self.reason is not None:
            rendered["reason"] = self.reason
        return rendered


@dataclass(frozen=True, slots=True)
class Values:
    """Constraints on each value of a map or list: ``Annotated[int | str, Values(...)]``."""

    pattern: str | None = None
    max_length: int | None = None


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """The OpenAPI side of one field. ``None`` means "not constrained"."""

    description: str
    json_name: str | None = None
    required: bool = False
    default: Any = None
    enum: tuple[str, ...] | None = None
    pattern: str | None = None
    format: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    list_type: ListType | None = None
    list_map_keys: tuple[str, ...] | None = None
    rules: tuple[Rule, ...] = ()


def camel(name: str) -> str:
    """``swap_budget`` -> ``swapBudget``: Kubernetes JSON names are lower camel case."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def api_field(
    description: str,
    *,
    default_factory: Callable[[], Any] | None = None,
    **constraints: Any,
) -> Any:
    """A dataclass field carrying its OpenAPI constraints (see :class:`FieldSpec`).

    The Python default is ``None`` (absent), or ``default_factory()`` for lists and maps; the
    *server-side* default, applied by the API server, is the ``default`` constraint. They differ
    on purpose: reading an object and writing it back must not add fields the user never set.
    """
    spec = FieldSpec(description=description, **constraints)
    metadata = {METADATA_KEY: spec}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=None, metadata=metadata)


def field_spec(field: dataclasses.Field[Any]) -> FieldSpec | None:
    """The API declaration of a dataclass field, or None for private fields such as ``raw``."""
    metadata: Mapping[str, Any] = field.metadata
    spec = metadata.get(METADATA_KEY)
    return spec if isinstance(spec, FieldSpec) else None


@dataclass(frozen=True, slots=True)
class DeclaredField:
    """One API field of a struct: Python attribute, JSON name, resolved type and constraints."""

    attribute: str
    json_name: str
    type: Any
    spec: FieldSpec


def declared_fields(cls: type) -> tuple[DeclaredField, ...]:
    """The API fields of ``cls`` in declaration order (``raw`` and private fields left out)."""
    cached = _DECLARED.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls, include_extras=True)
    found = tuple(
        DeclaredField(field.name, spec.json_name or camel(field.name), hints[field.name], spec)
        for field in dataclasses.fields(cls)
        if (spec := field_spec(field)) is not None
    )
    _DECLARED[cls] = found
    return found


_DECLARED: dict[type, tuple[DeclaredField, ...]] = {}
