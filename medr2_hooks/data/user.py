"""The user's registered benchmarks: declarations kept under ``$MEDR2_CONFIG_DIR/benchmarks/<name>.yaml``.

``medr2 benchmark add FILE`` validates every row of a declaration (:func:`medr2_hooks.data.declared.check`) and
copies it here; from then on :func:`medr2_hooks.data.benchmark` knows the name in every process (lm-eval's too).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from .. import settings
from ..config import ConfigError, load_yaml
from ..errors import UnknownNameError
from ..fs import safe_component, write_yaml
from . import declared


def folder() -> Path:
    return settings.config_dir() / "benchmarks"


def declarations() -> dict[str, declared.Declaration]:
    """The registered declarations, parsed again only when a file in the folder changed (prompts ask per item)."""
    files = sorted(folder().glob("*.yaml")) if folder().is_dir() else []
    return dict(_parsed(tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)))


@lru_cache(maxsize=4)
def _parsed(files: tuple) -> dict[str, declared.Declaration]:
    out = {}
    for name, _, _ in files:
        path = Path(name)
        decl = declared.parse(load_yaml(path), str(path))
        if decl.name != path.stem:
            raise ConfigError(f"{path}: declares {decl.name!r} but the file is named {path.stem!r}; "
                              f"remove it with `medr2 benchmark remove {path.stem}` and add it again")
        out[decl.name] = decl
    return out


def register(decl: declared.Declaration, builtin: list[str], replace: bool = False) -> Path:
    """Write ``decl`` (already checked) to the user folder; a built-in name, or a registered one without
    ``replace``, is an error."""
    if decl.name in builtin:
        raise ConfigError(f"{decl.origin}: name {decl.name!r} is a built-in benchmark; choose another name")
    path = folder() / f"{decl.name}.yaml"
    if path.exists() and not replace:
        raise ConfigError(f"{decl.origin}: benchmark {decl.name!r} is already registered ({path}); "
                          f"pass --replace to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_yaml(path, decl.to_json(), f"# registered by `medr2 benchmark add {decl.origin}`\n")
    return path


def unregister(name: str) -> Path:
    """Delete a registered declaration: only a name ``medr2 benchmark list`` shows, only the file it wrote."""
    registered = declarations()
    if name not in registered:
        raise UnknownNameError("registered benchmark", name, list(registered))
    path = folder() / f"{safe_component(name, 'benchmark name')}.yaml"
    path.unlink()
    return path
