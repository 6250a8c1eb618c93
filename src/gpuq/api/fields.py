"""Unknown fields: what a manifest sets that its model does not define (reported as warnings).

:class:`~gpuq.api.kueue.Loose` models (status sections, pod templates) are exempt.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from gpuq.api import kueue
from gpuq.api.diagnostics import FieldPath


def unknown_fields(value: Any, prefix: FieldPath) -> Iterator[FieldPath]:
    """Yield the path of every unknown field in a parsed model (``Loose`` models are exempt)."""
    if isinstance(value, BaseModel):
        if not isinstance(value, kueue.Loose) and value.__pydantic_extra__:
            for key in value.__pydantic_extra__:
                yield (*prefix, key)
        for name, info in type(value).model_fields.items():
            yield from unknown_fields(getattr(value, name), (*prefix, info.alias or name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from unknown_fields(item, (*prefix, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, BaseModel | list):
                yield from unknown_fields(item, (*prefix, str(key)))


def unknown_raw_fields(model: type[BaseModel], data: Any, prefix: FieldPath) -> Iterator[FieldPath]:
    """Unknown fields of raw data that failed validation, found by walking the model's fields."""
    if not isinstance(data, dict) or issubclass(model, kueue.Loose):
        return
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        fields[name] = fields[info.alias or name] = info.annotation
    for key, value in data.items():
        if key not in fields:
            yield (*prefix, str(key))
        else:
            yield from _unknown_in(fields[key], value, (*prefix, str(key)))


def _unknown_in(annotation: Any, value: Any, prefix: FieldPath) -> Iterator[FieldPath]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        yield from _unknown_in(args[0], value, prefix)
    elif origin in (Union, UnionType):
        models = [a for a in args if a is not type(None)]
        if len(models) == 1:
            yield from _unknown_in(models[0], value, prefix)
    elif origin in (list, tuple, Sequence) and args and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unknown_in(args[0], item, (*prefix, index))
    elif origin in (dict, Mapping) and len(args) == 2 and isinstance(value, dict):
        for key, item in value.items():
            yield from _unknown_in(args[1], item, (*prefix, str(key)))
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from unknown_raw_fields(annotation, value, prefix)
