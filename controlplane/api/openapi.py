"""OpenAPI v3 schemas generated from the API structs, in the structural form CRDs require.

Every node gets a ``type`` (or ``x-kubernetes-int-or-string`` / preserve-unknown-fields for the
few free-form places), every struct lists its properties, and the constraints and CEL rules come
from the field declarations. Nothing here knows about ModelPool: it turns any
:class:`~controlplane.api.struct.ApiObject` into a schema.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from controlplane.api.fields import DeclaredField, FieldSpec, Values, declared_fields
from controlplane.api.struct import ApiObject, is_int_or_string, strip_optional

Schema = dict[str, Any]


def description_of(cls: type) -> str:
    """The first paragraph of a class docstring, on one line (what ``kubectl explain`` shows)."""
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def struct_schema(cls: type[ApiObject]) -> Schema:
    """The schema of one struct: properties, required fields and the struct's CEL rules."""
    fields = declared_fields(cls)
    schema: Schema = {"description": description_of(cls), "type": "object"}
    schema["properties"] = {field.json_name: field_schema(field) for field in fields}
    required = [field.json_name for field in fields if field.spec.required]
    if required:
        schema["required"] = required
    if cls.KEEP_UNKNOWN_FIELDS:
        schema["x-kubernetes-preserve-unknown-fields"] = True
    if cls.RULES:
        schema["x-kubernetes-validations"] = [rule.to_openapi() for rule in cls.RULES]
    return schema


def field_schema(field: DeclaredField) -> Schema:
    """A property: the schema of its type, narrowed by its declared constraints."""
    schema = type_schema(field.type)
    schema["description"] = field.spec.description
    _constrain(schema, field.spec)
    # Readable output: description first, then type, then the rest as declared.
    return {"description": schema.pop("description"), **schema}


def type_schema(tp: Any) -> Schema:
    """The schema of a Python annotation (``X | None`` is the schema of ``X``: optional)."""
    tp = strip_optional(tp)
    if typing.get_origin(tp) is typing.Annotated:
        base, *extras = typing.get_args(tp)
        schema = type_schema(base)
        for extra in extras:
            if isinstance(extra, Values):
                _constrain_values(schema, extra)
        return schema
    if is_int_or_string(tp):
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
        }
    if isinstance(tp, type) and issubclass(tp, ApiObject):
        return struct_schema(tp)
    scalar = _SCALARS.get(tp)
    if scalar is not None:
        return {"type": scalar}
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        return {"type": "array", "items": type_schema(item)}
    if origin is dict:
        key, value = typing.get_args(tp)
        if key is not str:
            raise TypeError(f"map keys must be str, not {key!r}")
        if value is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": type_schema(value)}
    raise TypeError(f"no OpenAPI schema for {tp!r}")


_SCALARS: dict[Any, str] = {str: "string", int: "integer", bool: "boolean", float: "number"}

#: FieldSpec attribute -> OpenAPI keyword, for the constraints that are copied as they are.
_KEYWORDS = (
    ("format", "format"),
    ("default", "default"),
    ("enum", "enum"),
    ("pattern", "pattern"),
    ("minimum", "minimum"),
    ("maximum", "maximum"),
    ("min_length", "minLength"),
    ("max_length", "maxLength"),
    ("min_items", "minItems"),
    ("max_items", "maxItems"),
    ("list_type", "x-kubernetes-list-type"),
    ("list_map_keys", "x-kubernetes-list-map-keys"),
)


def _constrain_values(schema: Schema, values: Values) -> None:
    if values.pattern is not None:
        schema["pattern"] = values.pattern
    if values.max_length is not None:
        schema["maxLength"] = values.max_length


def _constrain(schema: Schema, spec: FieldSpec) -> None:
    for attribute, keyword in _KEYWORDS:
        value = getattr(spec, attribute)
        if value is not None:
            schema[keyword] = list(value) if isinstance(value, tuple) else value
    if spec.rules:
        rules = schema.setdefault("x-kubernetes-validations", [])
        rules.extend(rule.to_openapi() for rule in spec.rules)
