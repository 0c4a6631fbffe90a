"""Closed-set length bias: label names scored by their summed log-likelihood vs single-token menu letters.

    python bench/bench_label_bias.py [--index textbooks_demo] [--docs 200] [--model embedded:gemma-270m] [--json]

On ``--docs`` passages of the index (a seeded sample), runs the evidence-level (9 labels) and document-type
(16 labels) decisions three ways with the same model:
  names       the earlier rule: the prompt lists the names, each name's tokens' log-likelihood summed
  letters     ``label_scoring: letters``: a lettered menu, each label's single letter scored
  token_mean  ``label_scoring: token_mean``: the lettered menu, each name's mean log-likelihood per token
and prints how many argmax decisions each new rule changed against ``names``, the mean probability each rule
gives to labels by their token count (the length bias: multi-token names lose mass under ``names``), and the
argmax histograms (a position bias shows as one letter taking most decisions).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def names_prompt(question: str, labels: list[str], document: str, cue: str) -> str:
    """The earlier prompt: the label names listed inline, the name scored after the cue."""
    return f"{question} Choose one: {', '.join(labels)}.\n\nText: {document}\n{cue}:"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", default="textbooks_demo")
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--model", default="embedded:gemma-270m")
    parser.add_argument("--max-doc-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from medr2_hooks.corpus.store import CorpusStore
    from medr2_hooks.llm import BackendPool
    from medr2_hooks.llm.closed_set import choice_distribution, label_distribution
    from medr2_hooks.rerank.fine import DOC_TYPES, EVIDENCE_LEVELS, doc_type_prompt, level_prompt
    from medr2_hooks.retrieve.build import ensure_index

    store = CorpusStore(ensure_index(args.index, log=lambda *_: None) / "corpus")
    rows = np.sort(np.random.default_rng(0).choice(len(store.passages), size=min(args.docs, len(store.passages)),
                                                   replace=False))
    backend = BackendPool().get({"backend": "hf", "model": args.model, "batch_size": args.batch_size})
    docs = [backend.truncate(t, args.max_doc_tokens) for t in store.passage_texts(rows)]
    tok = backend.tokenizer if hasattr(backend, "tokenizer") else None
    report = {"model": args.model, "index": args.index, "documents": len(docs), "decisions": {}}
    for name, labels, menu_prompt, question, cue in (
        ("evidence_level", list(EVIDENCE_LEVELS), level_prompt, "Which kind of evidence is this medical text?",
         "Kind of evidence"),
        ("doc_type", list(DOC_TYPES), doc_type_prompt, "Which kind of text is this?", "Kind of text"),
    ):
        t = time.perf_counter()
        dists = {"names": label_distribution(backend, [names_prompt(question, labels, d, cue) for d in docs], labels,
                                             name)}
        seconds = {"names": round(time.perf_counter() - t, 1)}
        for rule in ("letters", "token_mean"):
            t = time.perf_counter()
            dists[rule] = choice_distribution(backend, [menu_prompt(d, rule) for d in docs], labels, name, rule)
            seconds[rule] = round(time.perf_counter() - t, 1)
        lengths = ([len(tok(" " + lab, add_special_tokens=False)["input_ids"]) for lab in labels] if tok is not None
                   else [len(lab.split()) for lab in labels])
        by_len = {}
        for n in sorted(set(lengths)):
            cols = [i for i, length in enumerate(lengths) if length == n]
            by_len[n] = {"labels": len(cols), **{f"{rule}_mean_p": float(d[:, cols].sum(1).mean() / len(cols))
                                                 for rule, d in dists.items()}}
        argmax = {rule: d.argmax(1) for rule, d in dists.items()}
        report["decisions"][name] = {
            "labels": len(labels), "of": len(docs), "seconds": seconds,
            "changed_vs_names": {rule: int((argmax[rule] != argmax["names"]).sum())
                                 for rule in ("letters", "token_mean")},
            "mean_p_per_label_by_token_count": by_len,
            "argmax": {rule: dict(Counter(labels[i] for i in a).most_common()) for rule, a in argmax.items()},
        }
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{args.model} on {len(docs)} passages of {args.index}")
    for name, d in report["decisions"].items():
        changed = ", ".join(f"{rule} {n}" for rule, n in d["changed_vs_names"].items())
        print(f"\n{name} ({d['labels']} labels): argmax decisions changed against names: {changed} (of {d['of']}); "
              f"seconds {d['seconds']}")
        print("  tokens/label  labels  mean p: names  letters  token_mean")
        for n, v in d["mean_p_per_label_by_token_count"].items():
            print(f"  {n:>12}  {v['labels']:>6}  {v['names_mean_p']:>13.4f}  {v['letters_mean_p']:>7.4f}  "
                  f"{v['token_mean_mean_p']:>10.4f}")
        for rule, hist in d["argmax"].items():
            print(f"  argmax ({rule}): {hist}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
