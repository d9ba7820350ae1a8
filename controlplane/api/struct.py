"""The base of every API struct, and the codec between structs and the API's plain dicts.

Reading walks the declared fields (:func:`controlplane.api.fields.declared_fields`); writing
overlays them onto the dict the object was read from. That overlay is the whole point: a field
this version of the code does not know (one added by a newer operator, or by another tool) is
carried through a read-modify-write untouched, where a plain "serialise what I know" would
silently delete it on the next update.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

from controlplane.api.fields import Rule, declared_fields

T = TypeVar("T", bound="ApiObject")


@dataclass(kw_only=True)
class ApiObject:
    """Base of every API struct: its docstring's first paragraph is its schema description.

    ``RULES`` are the CEL rules of the object as a whole (for example "the default names a
    member"), evaluated by the API server on every write. ``raw`` is the dict the object was read
    from (see the module docstring).
    """

    RULES: ClassVar[tuple[Rule, ...]] = ()
    #: Keep fields the struct does not declare (``x-kubernetes-preserve-unknown-fields``): for a
    #: Kubernetes type passed through whole (a Volume), of which only some fields are read.
    KEEP_UNKNOWN_FIELDS: ClassVar[bool] = False

    raw: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Read ``data`` (as the API server sent it); ``data`` itself is never mutated."""
        return decode_struct(cls, data, cls.__name__)

    def to_dict(self) -> dict[str, Any]:
        """The API dict: the original one with every known field set to its current value."""
        return encode_struct(self)


def is_int_or_string(tp: Any) -> bool:
    """``int | str``: the API's IntOrString (quantities, ports by name)."""
    return _union_args(strip_annotated(tp)) == {int, str}


def strip_annotated(tp: Any) -> Any:
    """``Annotated[X, ...]`` -> ``X``; the codec needs only the shape, not the constraints."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def strip_optional(tp: Any) -> Any:
    """``X | None`` -> ``X``; any other type unchanged (``Annotated`` is kept)."""
    args = _union_args(tp)
    if args is None or type(None) not in args:
        return tp
    rest = [arg for arg in typing.get_args(tp) if arg is not type(None)]
    if len(rest) == 1:
        return rest[0]
    return typing.Union[tuple(rest)]  # noqa: UP007 - built from a runtime tuple


def _union_args(tp: Any) -> set[Any] | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return set(typing.get_args(tp))
    return None


def decode_struct(cls: type[T], data: Mapping[str, Any], path: str) -> T:
    if not isinstance(data, Mapping):
        raise TypeError(f"{path}: expected an object, got {type(data).__name__}")
    values = {
        field.attribute: _decode(field.type, data[field.json_name], f"{path}.{field.json_name}")
        for field in declared_fields(cls)
        if field.json_name in data
    }
    obj = cls(**values)
    obj.raw = copy.deepcopy(dict(data))
    return obj


def _decode(tp: Any, value: Any, path: str) -> Any:
    if value is None:
        return None
    tp = strip_annotated(strip_optional(tp))
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, ApiObject):
        return decode_struct(tp, value, path)
    if origin is list:
        if not isinstance(value, list):
            raise TypeError(f"{path}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_decode(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise TypeError(f"{path}: expected a map, got {type(value).__name__}")
        _, item = typing.get_args(tp)
        return {k: _decode(item, v, f"{path}.{k}") for k, v in value.items()}
    # Scalars and free-form JSON are kept as sent; the API server has validated them.
    return copy.deepcopy(value)


def encode_struct(obj: ApiObject) -> dict[str, Any]:
    out = copy.deepcopy(obj.raw)
    for field in declared_fields(type(obj)):
        value = getattr(obj, field.attribute)
        encoded = _encode(value)
        # Absent stays absent: an empty list or struct the user never wrote is not written back.
        if value is None or (encoded in ({}, []) and field.json_name not in obj.raw):
            out.pop(field.json_name, None)
        else:
            out[field.json_name] = encoded
    return out


def _encode(value: Any) -> Any:
    if isinstance(value, ApiObject):
        return encode_struct(value)
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return copy.deepcopy(value)
