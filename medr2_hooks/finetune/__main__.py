"""``accelerate launch [--config_file finetune/accelerate/<cfg>.yaml] -m medr2_hooks.finetune RECIPE [--max_steps N]``
(or ``torchrun --nproc_per_node N -m medr2_hooks.finetune RECIPE``): one process of a fine-tuning run."""

from __future__ import annotations

import sys

from ..errors import Medr2Error
from ..flags import Parser
from .command import add_arguments, run

if __name__ == "__main__":
    parser = Parser(prog="python -m medr2_hooks.finetune",
                                     description="full-parameter SFT from a recipe")
    add_arguments(parser)
    try:
        sys.exit(run(parser.parse_args()))
    except Medr2Error as exc:
        print(f"medr2 finetune: error: {exc}", file=sys.stderr)
        sys.exit(2)
