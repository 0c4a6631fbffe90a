"""``accelerate launch [--config_file finetune/accelerate/<cfg>.yaml] -m medr2_hooks.finetune RECIPE [--max_steps N]``"""

from __future__ import annotations

import sys

from ..cli.main import main

if __name__ == "__main__":
    sys.exit(main(["finetune", *sys.argv[1:]]))
