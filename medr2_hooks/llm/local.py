"""Local model files and devices: what identifies a model's weights, and where a model runs by default."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path


def local_folder(model: str) -> str | None:
    """The local folder ``model`` loads from (an embedded model's converted folder, or a folder given by path), or
    None for a hub id."""
    from . import embedded

    path = embedded.resolve(model) if embedded.is_embedded(model) else model
    return path if Path(path).is_dir() else None


@lru_cache(maxsize=8)
def weights_revision(path: str) -> str:
    """A local model folder's content hash (config + weights), or the hub commit for hub ids. Hashed once per
    process and folder state (file names, sizes, mtimes): run identities ask for it many times."""
    folder = Path(path)
    if not folder.is_dir():
        return "hub"
    files = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()
                         if p.suffix in (".json", ".safetensors", ".bin", ".txt")))
    return _content_hash(str(folder), files)


@lru_cache(maxsize=64)
def _content_hash(folder: str, files: tuple) -> str:
    h = hashlib.sha256()
    for name, _, _ in files:
        with open(Path(folder) / name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()[:16]


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_causal_lm(path: str, dtype):
    """A causal language model from ``path``, refused when transformers had to initialise any of its weights afresh
    (a sentence encoder or a classifier loads as a causal LM with a random head and would answer random text)."""
    from transformers import AutoModelForCausalLM

    from ..errors import Medr2Error

    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, output_loading_info=True)
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise Medr2Error(f"{path} is not a trained causal language model: transformers initialised {len(missing)} of "
                         f"its {type(model).__name__} weights afresh ({', '.join(missing[:3])}"
                         f"{', ...' if len(missing) > 3 else ''}); give a generator (a sentence encoder such as "
                         "embedded:minilm has no language-model head)")
    return model


def check_model_folder(name: str) -> None:
    """A Medr2Error when ``name`` is an existing path that holds no model (no ``config.json``); hub ids and
    ``embedded:`` names pass (they are resolved when loaded)."""
    from ..errors import Medr2Error

    path = Path(name).expanduser()
    if name.startswith("embedded:") or not path.exists():
        return
    if not path.is_dir() or not (path / "config.json").is_file():
        raise Medr2Error(f"{name} holds no model: expected a folder with config.json and weights (a transformers "
                         "save_pretrained folder)")


def chat_token_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The token ids of ``messages`` through the tokenizer's chat template, ending where the assistant answers (the
    template carries its own special tokens; transformers 5 returns a BatchEncoding where 4 returned a list)."""
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)
