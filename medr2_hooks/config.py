"""Typed configuration from YAML: dataclasses built with :func:`from_dict`, where an unknown or misspelt key
is an error naming the key, the valid keys, and where it was found (never a silent ``None``)."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from .errors import Medr2Error

T = TypeVar("T")


class ConfigError(Medr2Error):
    pass


def from_dict(cls: type[T], raw: Any, where: str) -> T:
    """Build dataclass ``cls`` from a mapping, recursing into dataclass-typed fields."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping for {cls.__name__}, found {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} for {cls.__name__}; valid keys: {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in raw.items():
        target = _dataclass_in(hints[name])
        if target is not None and isinstance(value, dict):
            value = from_dict(target, value, f"{where}.{name}")
        elif target is not None and isinstance(value, list):
            value = [from_dict(target, v, f"{where}.{name}[{i}]") for i, v in enumerate(value)]
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _dataclass_in(hint) -> type | None:
    """The dataclass named by a hint such as ``Foo``, ``Foo | None`` or ``list[Foo]``."""
    if dataclasses.is_dataclass(hint):
        return hint
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) in (typing.Union, list):
        for arg in typing.get_args(hint):
            found = _dataclass_in(arg)
            if found is not None:
                return found
    return None


def load_yaml(path: str | Path) -> dict:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    with open(path, encoding="utf-8") as fh:
        try:
            data = yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data
