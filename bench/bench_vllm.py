"""A Med-R² pre-pass against the engine's own limit: N items of ``medqa_usmle_medr2`` at the CPU twin's sizes
(experiments/settings.yaml ``cpu_twin``), every role on

1. ``hf``: the HF embedded backend, in process;
2. ``vllm``: vLLM in process (float32, eager);
3. ``served``: ``vllm serve`` (the same engine settings) through the ``openai`` backend at its default
   ``concurrency`` and ``request_batch``;
4. ``bare``: the engine calls side 2 made (the same token ids, sampling parameters and batches), replayed straight to
   the in-process engine: what the engine alone takes for those tokens, the limit.

Each round starts every side from an empty stage cache and an empty prefix cache, and the sides take turns
(bench/timing.py). Prints each side's median wall time, tokens/s (prompt + generated tokens of the replay) and its
ratio to the bare replay (median, min-max), then where side 2's time went (engine calls vs retrieval and the rest).

    .venv-vllm/bin/python bench/bench_vllm.py [--items 2] [--rounds 3] [--model embedded:smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from timing import interleaved, median_seconds, ratio, shown  # noqa: E402
from vllm_parity import reset_prefix_cache, start_server  # noqa: E402

ENGINE = {"dtype": "float32", "enforce_eager": True, "max_length": 2048}


class Recording:
    """Stands in for a ``vllm.LLM``: passes every ``generate`` through, keeping its inputs and the seconds it took."""

    def __init__(self, llm):
        self.llm, self.calls, self.seconds = llm, [], 0.0

    def generate(self, prompts, params, **kwargs):
        started = time.perf_counter()
        out = self.llm.generate(prompts, params, **kwargs)
        self.seconds += time.perf_counter() - started
        self.calls.append((prompts, params))
        return out

    def __getattr__(self, name):
        return getattr(self.llm, name)


def prepass(spec, pool, searcher, root: Path) -> None:
    """One pre-pass of ``spec``'s items with roles from ``pool``, from an empty stage cache under ``root``."""
    from medr2_hooks.cache import StageCache
    from medr2_hooks.pipeline.toolbox import StageToolbox
    from medr2_hooks.prepass.packs import kernel_threads, prepare_records

    folder = Path(tempfile.mkdtemp(dir=root))
    cache = StageCache(folder / "stages.sqlite")
    try:
        with kernel_threads(spec.threads):
            prepare_records(StageToolbox(spec.cfg, cache=cache, pool=pool, searcher=searcher), spec.benchmark,
                            spec.eval_records, spec.demos, spec.scoring)
    finally:
        cache.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="embedded:smollm2-135m-instruct")
    parser.add_argument("--port", type=int, default=18396)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from medr2_hooks.experiments.config import named_setting
    from medr2_hooks.lmeval.registry import task_hook_kwargs
    from medr2_hooks.llm import BackendPool
    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.prepass.spec import prepass_spec
    from medr2_hooks.retrieve.build import ensure_index
    from medr2_hooks.retrieve.searcher import Searcher

    folder = resolve(args.model)
    twin = named_setting("cpu_twin", "bench_vllm")["method_override"]
    llms = {"hf": {"backend": "hf", "model": args.model, "batch_size": 8},
            "vllm": {"backend": "vllm", "model": args.model, **ENGINE},
            "served": {"backend": "openai", "api": "completions", "model": folder,
                       "base_url": f"http://127.0.0.1:{args.port}/v1", "tokenizer": folder}}
    hooks = {side: task_hook_kwargs(["medqa_usmle_medr2"], {"limit": args.items,
                                                            "method_override": {**twin, "llm": llm}})
             for side, llm in llms.items()}
    specs = {side: prepass_spec(**kwargs["medqa_usmle_medr2"]) for side, kwargs in hooks.items()}
    searcher = Searcher.open(ensure_index("textbooks_demo", log=lambda *_: None))
    pool = BackendPool()
    vllm = pool.get(llms["vllm"])
    recording = vllm.llm = Recording(vllm.llm)
    server = start_server(folder, args.port)
    base = f"http://127.0.0.1:{args.port}"
    root = Path(tempfile.mkdtemp(prefix="bench_vllm-"))
    try:
        prepass(specs["vllm"], pool, searcher, root)  # warm-up, and the calls the bare replay sends
        calls = list(recording.calls)
        engine = recording.llm
        tokens = 0
        for prompts, params in calls:
            tokens += sum(len(o.prompt_token_ids) + len(o.outputs[0].token_ids)
                          for o in engine.generate(prompts, params, use_tqdm=False))
        pool.get(llms["hf"])  # loaded before the rounds (the searcher and encoder were by the warm-up)

        def on(side: str):
            def run():
                if side == "served":
                    reset_prefix_cache(base)
                else:
                    engine.reset_prefix_cache()
                prepass(specs[side], pool, searcher, root)
            return run

        def bare():
            engine.reset_prefix_cache()
            for prompts, params in calls:
                engine.generate(prompts, params, use_tqdm=False)

        recording.seconds = 0.0
        times = interleaved({"hf": on("hf"), "vllm": on("vllm"), "served": on("served"), "bare": bare},
                            min_seconds=1.0, min_rounds=args.rounds)
        engine_share = recording.seconds / sum(times["vllm"])
    finally:
        import signal

        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)

    print(f"Med-R2 pre-pass, {args.items} items of medqa_usmle_medr2 at the CPU twin's sizes, roles on {args.model} "
          f"(float32); {len(calls)} engine calls, {sum(len(p) for p, _ in calls)} requests, {tokens} tokens")
    rows = {}
    for side in ("hf", "vllm", "served", "bare"):
        wall = median_seconds(times, side)
        rows[side] = {"wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 1),
                      "to_bare": ratio(times, side, "bare")}
        print(f"  {side:7s} {wall:8.2f} s  {tokens / wall:9.1f} tokens/s  {shown(rows[side]['to_bare'])} of bare")
    print(f"  in-process vLLM: {engine_share:.0%} of its wall time in engine calls")
    print(json.dumps({"items": args.items, "calls": len(calls), "tokens": tokens, "sides": rows,
                      "vllm_engine_share": round(engine_share, 3)}))


if __name__ == "__main__":
    main()
