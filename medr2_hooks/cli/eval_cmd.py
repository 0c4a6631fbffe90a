"""``medr2 eval``: run lm-eval on medr2 tasks (lm-eval's usual flags, plus embedded model names)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "examples:\n"
        "  medr2 eval --tasks medqa_usmle_direct --model embedded:gemma-270m --limit 20\n"
        "  medr2 eval --tasks medr2_qa_direct --model vllm --model_args pretrained=meta-llama/Llama-3.1-8B-Instruct\n"
        "Results land in results/runs/<name>/ (lm-eval JSON, per-sample JSONL, run.json); the W&B run is\n"
        "offline under results/wandb/ (upload later with `wandb sync results/wandb/offline-run-*`)."
    )
    parser.add_argument("--tasks", required=True, help="comma-separated task or group names (medr2 tasks list)")
    parser.add_argument("--model", default="embedded:gemma-270m",
                        help="embedded:gemma-270m (default; scored by hf-continuation), or an lm-eval model "
                             "type: hf, vllm, "
                             "local-completions, ..., or hf-continuation (hf with logits for the continuation "
                             "positions only: the same log-likelihoods in far less memory at long windows)")
    parser.add_argument("--model_args", default="",
                        help="lm-eval model args, e.g. pretrained=<hub id or path>,dtype=bfloat16")
    parser.add_argument("--limit", type=float, help="first N items per task (or a fraction if < 1)")
    parser.add_argument("--num_fewshot", type=int, help="demonstrations from the task's demo pool")
    parser.add_argument("--batch_size", help="lm-eval batch size (default for embedded Gemma: 4, 1 for retrieval "
                                             "tasks; else auto)")
    parser.add_argument("--gen_kwargs", help="generation overrides for generative tasks, e.g. max_gen_toks=64")
    parser.add_argument("--apply_chat_template", action="store_true",
                        help="wrap each prompt in the target's chat template (chat models; lm-eval's flag)")
    parser.add_argument("--device", help="cpu, cuda, cuda:0, ... (default: lm-eval's choice)")
    parser.add_argument("--output_path", help="folder for this run (default: results/runs/<name>)")
    parser.add_argument("--log_samples", action=argparse.BooleanOptionalAction, default=True,
                        help="write per-sample logs (default: on)")
    parser.add_argument("--metadata", default="{}", help='JSON passed to the tasks, e.g. \'{"source": "hub"}\'')
    parser.add_argument("--setting", help="a named setting of experiments/settings.yaml whose method_override goes "
                                          "under --metadata's (cpu_twin: the CPU twin's loop sizes)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--run_name", help="name of the run folder and W&B run")
    parser.add_argument("--wandb_project", default="medr2")
    parser.add_argument("--wandb_group", help="W&B group (default: the task list)")
    parser.add_argument("--no_wandb", action="store_true", help="do not create a W&B run")
    parser.add_argument("--no_prepare", action="store_true",
                        help="run retrieval pre-passes inside lm-eval's dataset hook instead of `medr2 prepare` first")


def run(args: argparse.Namespace) -> int:
    from ..lmeval.runner import EvalConfig, run_eval

    cfg = EvalConfig(
        tasks=[t.strip() for t in args.tasks.split(",") if t.strip()],
        model=args.model,
        model_args=args.model_args,
        limit=args.limit,
        num_fewshot=args.num_fewshot,
        batch_size=args.batch_size,
        gen_kwargs=args.gen_kwargs,
        apply_chat_template=args.apply_chat_template,
        device=args.device,
        log_samples=args.log_samples,
        output_path=args.output_path,
        seed=args.seed,
        metadata=metadata_of(args),
        wandb=not args.no_wandb,
        wandb_project=args.wandb_project,
        wandb_group=args.wandb_group,
        run_name=args.run_name,
        prepare=not args.no_prepare,
    )
    run_eval(cfg)
    return 0


def metadata_of(args: argparse.Namespace) -> dict:
    """``--metadata`` with ``--setting``'s method_override under it (``medr2 eval`` and ``medr2 prepare``)."""
    from ..config import parse_json_object

    metadata = parse_json_object(args.metadata, "--metadata")
    if not args.setting:
        return metadata
    from ..experiments.config import setting_metadata

    return setting_metadata(args.setting, metadata)
