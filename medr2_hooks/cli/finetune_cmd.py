"""``medr2 finetune``: full-parameter SFT from a recipe (one process here; ``accelerate launch`` for more)."""

from __future__ import annotations

from ..finetune.command import add_arguments, run

__all__ = ["add_arguments", "run"]
