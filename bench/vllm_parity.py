"""The same weights on two engines, and vLLM's prefix cache measured: every closed-set menu the Med-R² pre-pass
reads, and its greedy generations, on HF (in process) and on ``vllm serve`` (the vLLM environment, ``make
vllm-env``), float32 on both sides; then a leveler and a typer stage over the same passages read both ways on the
served engine with its prefix cache on and reset between them.

    .venv/bin/python bench/vllm_parity.py [--documents 24] [--model embedded:smollm2-135m-instruct]

Prints, per menu (classifier's two, leveler, typer, LLM relevance, the CoT's answer): items, decisions that agree,
max |delta p|; per generation role (reformulation, CoT): the share of generated tokens identical up to the first
divergence and how many replies differ; per menu path (one request per menu; ``token_mean``: one prompt-logprob
sequence per label): requests per decision, ``vllm:prefix_cache_hits_total`` / ``queries_total`` from /metrics,
and the prompt tokens the engine computed (queries - hits). Passages are the demo index's (``textbooks_demo``),
questions MedQA-USMLE's dev items (stems only).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def start_server(model: str, port: int) -> subprocess.Popen:
    """``vllm serve`` from .venv-vllm with prefix caching and its dev endpoints (``/reset_prefix_cache``)."""
    vllm = ROOT / ".venv-vllm" / "bin" / "vllm"
    if not vllm.is_file():
        sys.exit(f"{vllm} is missing: make vllm-env")
    server = subprocess.Popen(
        [str(vllm), "serve", model, "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048", "--port",
         str(port), "--host", "127.0.0.1", "--enable-prefix-caching", "--gpu-memory-utilization", "0.15",
         "--max-logprobs", "32"],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_SERVER_DEV_MODE": "1"}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline:
        if server.poll() is not None:
            sys.exit(f"vllm serve exited {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return server
        except OSError:
            time.sleep(2)
    os.killpg(server.pid, signal.SIGKILL)
    sys.exit("vllm serve did not start in 10 minutes")


def metrics(base: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
                 "vllm:request_success_total"):
        out[name] = sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))
    return out


def reset_prefix_cache(base: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{base}/reset_prefix_cache", method="POST"), timeout=30).close()


def inputs(n: int) -> tuple[list[str], list[str], list[dict]]:
    """``n`` demo-index passages (first 120 words), ``n`` MedQA-USMLE dev stems and their options."""
    import numpy as np

    from medr2_hooks import data
    from medr2_hooks.corpus.store import CorpusStore
    from medr2_hooks.retrieve.build import ensure_index

    store = CorpusStore(ensure_index("textbooks_demo", log=lambda *_: None) / "corpus")
    try:
        pids = np.linspace(0, len(store.passages) - 1, n).astype(int).tolist()
        passages = [" ".join(t.split()[:120]) for t in store.passage_texts(pids)]
    finally:
        store.close()
    records = [r for r in data.load("medqa_usmle") if r.meta.get("split") == "dev"][:n]
    return passages, [r.question for r in records], [dict(r.options) for r in records]


def menus(backend, passages, questions, options, scoring="letters", only: str | None = None) -> dict:
    """Each menu's probabilities ``[items, labels]``, as the pre-pass builds its prompts (``only``: that menu)."""
    from medr2_hooks.classify import EBM_CATEGORIES, QUESTION_TYPES, ebm_prompt, qtype_prompt
    from medr2_hooks.cot import cot_prompt
    from medr2_hooks.llm.closed_set import choice_distribution, label_distribution
    from medr2_hooks.rerank.coarse import relevance_prompt
    from medr2_hooks.rerank.fine import DOC_TYPES, EVIDENCE_LEVELS, doc_type_prompt, level_prompt

    cot = [cot_prompt(backend, q, o, [p]) + " The evidence points to one option.\nTherefore, the answer is"
           for q, o, p in zip(questions, options, passages)]
    reads = {
        "classifier (EBM)": lambda: choice_distribution(backend, [ebm_prompt(q, scoring) for q in questions],
                                                        list(EBM_CATEGORIES), "classifier", scoring),
        "classifier (type)": lambda: choice_distribution(backend, [qtype_prompt(q, scoring) for q in questions],
                                                         list(QUESTION_TYPES), "classifier", scoring),
        "leveler": lambda: choice_distribution(backend, [level_prompt(p, scoring) for p in passages],
                                               list(EVIDENCE_LEVELS), "leveler", scoring),
        "typer": lambda: choice_distribution(backend, [doc_type_prompt(p, scoring) for p in passages],
                                             list(DOC_TYPES), "typer", scoring),
        "relevance (coarse)": lambda: label_distribution(
            backend, [relevance_prompt(q, p) for q, p in zip(questions, passages)], ["yes", "no"], "coarse"),
        "cot_answer": lambda: label_distribution(backend, cot, list(options[0]), "cot_answer"),
    }
    return {name: read() for name, read in reads.items() if only in (None, name)}


def generations(backend, passages, questions, options) -> dict[str, list[str]]:
    from medr2_hooks.cot import cot_prompt
    from medr2_hooks.reformulate import reformulation_prompt

    return {"reformulation": backend.generate([reformulation_prompt(backend, q, "diagnosis") for q in questions], 48,
                                              role="reformulator"),
            "cot": backend.generate([cot_prompt(backend, q, o, [p]) for q, o, p in zip(questions, options, passages)],
                                    64, role="cot")}


def shared_prefix(tok, a: str, b: str) -> tuple[int, int]:
    x, y = tok.encode(a, add_special_tokens=False), tok.encode(b, add_special_tokens=False)
    same = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    return same, max(len(x), len(y))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded:smollm2-135m-instruct")
    parser.add_argument("--documents", type=int, default=24)
    parser.add_argument("--port", type=int, default=18397)
    args = parser.parse_args()

    import numpy as np

    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.llm.hf import HFBackend
    from medr2_hooks.llm.openai_backend import OpenAIBackend

    folder = resolve(args.model) if args.model.startswith("embedded:") else args.model
    passages, questions, options = inputs(args.documents)
    server = start_server(folder, args.port)
    base = f"http://127.0.0.1:{args.port}"
    try:
        served = OpenAIBackend(folder, base_url=f"{base}/v1", tokenizer=folder, top_logprobs=32)
        hf = HFBackend(folder, dtype="float32", batch_size=8)
        print(f"{args.model} ({folder}), float32 on both engines; {len(passages)} passages and questions\n")
        print("| menu | items | same decision | max abs delta p | labels outside vLLM's top 32 |\n"
              "|---|---|---|---|---|")
        ours = menus(hf, passages, questions, options)
        theirs, outside = {}, {}
        for name in ours:  # one menu at a time, to count the labels the served top-k left out
            before = served.usage.labels_outside_top_k
            theirs[name] = menus(served, passages, questions, options, only=name)[name]
            outside[name] = served.usage.labels_outside_top_k - before
        for name, p in ours.items():
            q = theirs[name]
            print(f"| {name} | {len(p)} | {int((p.argmax(1) == q.argmax(1)).sum())} | "
                  f"{float(np.abs(p - q).max()):.1e} | {outside[name]} |")
        print("\n| generation (greedy) | replies | identical replies | tokens identical up to the first divergence |"
              "\n|---|---|---|---|")
        a, b = generations(hf, passages, questions, options), generations(served, passages, questions, options)
        for role in a:
            pairs = [shared_prefix(hf.tokenizer, x, y) for x, y in zip(a[role], b[role])]
            print(f"| {role} | {len(pairs)} | {sum(x == y for x, y in zip(a[role], b[role]))} | "
                  f"{sum(s for s, _ in pairs)} / {sum(n for _, n in pairs)} |")

        from medr2_hooks.llm.closed_set import choice_distribution
        from medr2_hooks.rerank.fine import DOC_TYPES, EVIDENCE_LEVELS, doc_type_prompt, level_prompt

        print("\n| stage | path | decisions | requests | requests / decision | prefix cache hits / queries "
              "(tokens) | prompt tokens computed |\n|---|---|---|---|---|---|---|")
        stages = {"leveler": (level_prompt, list(EVIDENCE_LEVELS)), "typer": (doc_type_prompt, list(DOC_TYPES))}
        # each stage alone from an empty cache, both ways; then the typer right after the leveler, as the pre-pass
        # runs them (the same passage opens both prompts)
        for stage, path, reset, name in [(s, p, True, "one request per menu" if p == "letters" else
                                          "token_mean (a sequence per label)")
                                         for s in stages for p in ("letters", "token_mean")] + \
                                        [("leveler", "letters", True, None),
                                         ("typer", "letters", False, "one request per menu, after the leveler")]:
            render, labels = stages[stage]
            if reset:
                reset_prefix_cache(base)
            before = metrics(base)
            client = OpenAIBackend(folder, base_url=f"{base}/v1", tokenizer=folder, top_logprobs=32)
            choice_distribution(client, [render(p, path) for p in passages], labels, stage, path)
            after = metrics(base)
            if name is None:
                continue
            d = {k: after[k] - before[k] for k in after}
            queries, hits = d["vllm:prefix_cache_queries_total"], d["vllm:prefix_cache_hits_total"]
            requests, prompt = int(d["vllm:request_success_total"]), d["vllm:prompt_tokens_total"]
            print(f"| {stage} | {name} | {len(passages)} | {requests} | {requests / len(passages):.1f} | "
                  f"{int(hits)} / {int(queries)} | {int(prompt - hits)} |")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
