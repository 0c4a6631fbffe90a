"""Typed configuration from YAML: dataclasses built with :func:`from_dict`, where an unknown or misspelt key
is an error naming the key, the valid keys, and where it was found (never a silent ``None``)."""

from __future__ import annotations

import dataclasses
import math
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
        else:
            value = checked(value, hints[name], f"{where}.{name}")
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _type_name(hint) -> str:
    if isinstance(hint, type):
        return hint.__name__
    import re

    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", str(hint))


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error never prints an unbounded value (a YAML alias bomb
    expands to gigabytes when printed whole). Containers are summarised before any repr is built."""
    if limit < 8:
        return "…"
    if isinstance(value, (dict, list, tuple, set)):
        head = list(value.items())[:3] if isinstance(value, dict) else list(value)[:3]
        inner = ", ".join(short_repr(x, limit // 4) for x in head)
        value_text = f"{type(value).__name__} of {len(value)} ({inner}{', …' if len(value) > 3 else ''})"
    else:
        value_text = repr(value)
    return value_text if len(value_text) <= limit else value_text[: limit - 1] + "…"


def checked(value: Any, hint: Any, where: str) -> Any:
    """``value`` if it has the declared type ``hint`` (ints are accepted, and converted, where a float is
    declared; a bool is never an int), else a :class:`ConfigError` naming the field, the type and the value."""
    ok, out = _conform(value, hint)
    if not ok:
        raise ConfigError(f"{where}: expected {_type_name(hint)}, found {type(value).__name__} {short_repr(value)}")
    return out


def _conform(value: Any, hint: Any) -> tuple[bool, Any]:
    if hint is Any or hint is object:
        return True, value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, types.UnionType) or origin is typing.Union:
        for arg in args:
            ok, out = _conform(value, arg)
            if ok:
                return True, out
        return False, value
    if origin is typing.Literal:
        return value in args, value
    if hint is type(None):
        return value is None, value
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if dataclasses.is_dataclass(hint):
        return isinstance(value, hint), value
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False, value
        if not args or (origin is tuple and Ellipsis not in args and len(args) != len(value)):
            return not args, value
        elem = [args[0]] * len(value) if origin is list or Ellipsis in args else list(args)
        out = []
        for v, h in zip(value, elem):
            ok, v = _conform(v, h)
            if not ok:
                return False, value
            out.append(v)
        return True, type(value)(out) if origin is tuple else out
    if origin is dict or hint is dict:
        return isinstance(value, dict), value
    if isinstance(hint, type):
        return isinstance(value, hint), value
    return True, value


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


def merge(base: dict, override: dict) -> dict:
    """``override`` over ``base``, key by key into nested mappings (a method's ``conflict`` or ``roles`` block is
    merged, not replaced): the one merge rule of method settings."""
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_yaml(path: str | Path, aliases: bool = True) -> dict:
    """A YAML mapping from ``path`` (safe loading). ``aliases=False`` refuses anchors and aliases (``*name``): a
    user's declaration has no use for them, and nested aliases expand exponentially."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if not aliases and self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise ConfigError(f"{path}:{mark.line + 1}: YAML aliases (*name) are not allowed in this file")
            return super().compose_node(parent, index)

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    with open(path, encoding="utf-8") as fh:
        loader = Loader(fh)
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_expanded(node, path)
            data = loader.construct_document(node) if node is not None else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except RecursionError:
            raise ConfigError(f"{path}: YAML nested too deeply") from None
        finally:
            loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


YAML_MAX_NODES = 100_000  # a config's values once its aliases are expanded (the shipped ones hold < 2,000)


def _check_expanded(root, path: Path) -> None:
    """Refuse a YAML document whose aliases expand past :data:`YAML_MAX_NODES` values: nested aliases (a "billion
    laughs") load as a few shared objects but grow exponentially wherever the config is copied, merged or printed
    (8 levels of 10 aliases made a dry-run take 1.2 GB and hang). Counted over the node graph, each node once."""
    import yaml

    sizes: dict[int, int] = {}

    def size(node) -> int:
        if id(node) not in sizes:
            if isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            elif isinstance(node, yaml.SequenceNode):
                children = node.value
            else:
                children = []
            sizes[id(node)] = 1 + sum(size(child) for child in children)
            if sizes[id(node)] > YAML_MAX_NODES:
                mark = node.start_mark
                raise ConfigError(f"{path}:{mark.line + 1}: this value expands to over {YAML_MAX_NODES:,} values "
                                  "through its aliases (*name): not a config")
        return sizes[id(node)]

    size(root)


def in_range(obj: Any, name: str, low: float | None = None, high: float | None = None,
             low_open: bool = False) -> None:
    """Raise ValueError when field ``name`` of ``obj`` lies outside ``[low, high]`` (``(low, high]`` with
    ``low_open``) or is NaN; ``None`` values (an unset optional) pass. Called from dataclasses' ``__post_init__``."""
    value = getattr(obj, name)
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):  # NaN passes every comparison; JSON has neither
        raise ValueError(f"{name} must be a finite number, found {value!r}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if too_low or too_high:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
        hi = "" if high is None else f"<= {high:g}"
        raise ValueError(f"{name} must be {' and '.join(x for x in (lo, hi) if x)}, found {value!r}")


def parse_json_object(text: str, flag: str) -> dict:
    """A command-line JSON object (``--metadata '{...}'``), or a one-line ConfigError saying what is wrong."""
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag}: not valid JSON ({exc.msg} at character {exc.pos}): {text!r}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a JSON object such as '{{\"limit\": 5}}', found "
                          f"{type(value).__name__}: {text!r}")
    return value


def split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets and quotes (a JSON value may hold commas)."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def key_values(text: str | None, flag: str = "key=value string") -> dict[str, str]:
    """lm-eval's ``key=value,key=value`` strings (``--model_args``, ``--gen_kwargs``) as a mapping of strings: the one
    parser of them here. As lm-eval splits them, except that a value in brackets or quotes is kept whole
    (vLLM's ``hf_overrides={"rope_scaling": {...}}``, which a plain comma split would cut apart); a part without
    ``=`` is an error naming ``flag``."""
    out = {}
    for pair in split_top_level(text or ""):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"{flag}: expected key=value, found {pair!r}")
        out[key.strip()] = value.strip()
    return out


def target_model(model: str, model_args: str | None) -> str:
    """The model a run evaluates: ``pretrained=`` of its model_args (hf, vLLM), a served target's ``model=`` (the
    model its server was started with), else the model name itself. The one place that names the target."""
    args = key_values(model_args, "--model_args")
    return args.get("pretrained") or args.get("model") or model
