"""The fine-tuning command, shared by ``medr2 finetune`` and ``python -m medr2_hooks.finetune`` (what ``accelerate
launch`` / ``torchrun`` start on every process): its flags and its run (train, with the loss curve in an offline
W&B run on the main process)."""

from __future__ import annotations

import argparse
import json
import os

EPILOG = (
    "examples:\n"
    "  medr2 finetune cpu_usmle_dev_slice                 # embedded Gemma, bounded steps, 2 CPU cores\n"
    "  ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2 -m medr2_hooks.finetune cpu_usmle_dev_slice   # 2 CPU\n"
    "      processes (DDP over gloo; accelerate launch starts a single process on a CPU)\n"
    "  accelerate launch --config_file finetune/accelerate/multi_gpu_zero3.yaml \\\n"
    "      -m medr2_hooks.finetune paper_medmcqa_within\n"
    "A killed run resumes from its newest checkpoint when started again. The checkpoint lands in\n"
    "<output_dir>/final with medr2_training.json (trained items, steps, tokens, seconds); evaluate it with\n"
    "  medr2 eval --tasks medqa_usmle_direct --model hf --model_args pretrained=<output_dir>/final\n"
    "which refuses to score items the checkpoint was trained on."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("recipe", help="a recipe name in finetune/recipes/ or a YAML path")
    parser.add_argument("--max_steps", "--max-steps", dest="max_steps", type=int,
                        help="bound the number of optimizer steps")
    parser.add_argument("--model", help="the model to train (default: the recipe's; experiments train one per target)")
    parser.add_argument("--output_dir", "--output-dir", dest="output_dir",
                        help="where checkpoints go (default: $MEDR2_CACHE_DIR/finetune/<name>)")
    parser.add_argument("--no_wandb", "--no-wandb", dest="no_wandb", action="store_true",
                        help="do not log the loss curve to W&B (offline)")


def run(args: argparse.Namespace) -> int:
    from .. import settings
    from ..redact import redact, redacted_argv
    from .recipe import load_recipe
    from .train import train

    overrides = {k: v for k, v in (("max_steps", args.max_steps), ("output_dir", args.output_dir),
                                   ("model", args.model)) if v is not None}
    recipe = load_recipe(args.recipe, overrides)
    wb = None
    if not args.no_wandb and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        settings.results_dir().mkdir(parents=True, exist_ok=True)
        with redacted_argv():
            wb = wandb.init(project="medr2", name=f"finetune-{recipe.name}", job_type="finetune", group="finetune",
                            dir=str(settings.results_dir()), config=redact(recipe.to_json()),
                            mode=os.environ["WANDB_MODE"])
    manifest = train(recipe, wandb_run=wb)
    if wb is not None:
        wb.summary.update({k: manifest[k] for k in ("steps", "examples", "tokens", "train_seconds")})
        wb.finish()
    print(json.dumps({k: manifest[k] for k in ("steps", "examples", "tokens", "train_seconds", "device")}))
    return 0
