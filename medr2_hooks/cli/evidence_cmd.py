"""``medr2 evidence``: score each stage's documents against gold evidence (recall, nDCG, MRR, gold in the prompt)."""

from __future__ import annotations

import argparse

from .output import emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "examples:\n"
        "  medr2 eval --tasks bioasq_yn_vanilla_rag,bioasq_yn_medr2 --limit 20 --run_name gold \\\n"
        "      --metadata '{\"method_override\": {\"index\": \"bioasq_gold\"}}'\n"
        "  medr2 evidence gold                          # every stage of both methods, paired comparisons\n"
        "  medr2 evidence --search bioasq_gold --collection bioasq_gold   # the retrievers alone, every question\n"
        "Stages: each retriever (dense, bm25, splade), fused (D), coarse (S^c), fine (S^f), selected and packed,\n"
        "per iteration (.t1, .t2, ...) and for the iteration kept (.final). A run over a gold-evidence collection\n"
        "measures retrieval; its accuracy is a gold-corpus upper bound.")
    parser.add_argument("runs", nargs="*", help="run folders or names in results/runs (medr2 eval)")
    parser.add_argument("--collection", help="test collection (default: the one whose corpus the run's index holds)")
    parser.add_argument("--stages", help="comma-separated stages to show (default: packed and every .final stage)")
    parser.add_argument("--search", metavar="INDEX", help="score the index's retrievers on the collection's queries")
    parser.add_argument("--k", type=_positive, default=100,
                        help="with --search: documents per retriever (>= 1; default 100)")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, found {value}")
    return value


def run(args: argparse.Namespace) -> int:
    from ..errors import Medr2Error
    from ..evidence import collections, runs, scores

    if args.search:
        col = collections.collection(args.collection or (collections.for_index(args.search) or _none(args.search)).name)
        queries = col.queries()
        stages = runs.search(args.search, queries, args.k)
        label = f"search:{args.search}"
        empty = scores.check_judged(label, stages, col.qrels(), col.name)
        results = scores.stage_scores(label, stages, col.qrels(), list(queries), col.qrels("all"))
        return _print(args, col.name, results, [], {(label, s) for s in empty})
    if not args.runs:
        raise Medr2Error("name at least one run (or --search INDEX)")
    evidence = [e for name in args.runs for e in runs.from_run(name)]
    names = {args.collection} if args.collection else {(collections.for_index(e.index) or _none(e.index)).name
                                                       for e in evidence}
    if len(names) != 1:
        raise Medr2Error(f"the runs search different collections ({', '.join(sorted(names))}): score them apart")
    col = collections.collection(names.pop())
    wanted = [s.strip() for s in args.stages.split(",") if s.strip()] if args.stages else None
    known = {s for e in evidence for s in e.stages}
    unknown = [s for s in wanted or () if s not in known]
    if unknown or wanted == []:
        raise Medr2Error(f"--stages: unknown stage {', '.join(unknown) or repr(args.stages)}; these runs recorded: "
                         f"{', '.join(sorted(known))}")
    results, empty = [], set()
    for e in evidence:
        stages = {s: r for s, r in e.stages.items()
                  if (s in wanted if wanted else s == "packed" or s.endswith(".final"))}
        empty |= {(e.label, s) for s in scores.check_judged(e.label, stages, col.qrels(), col.name)}
        results += scores.stage_scores(e.label, stages, col.qrels(), e.questions, col.qrels("all"))
    if not results:
        raise Medr2Error(f"none of the runs' questions has relevance judgements in collection {col.name!r}")
    comparisons = [c for a in results for b in results if a.run < b.run and a.stage == b.stage
                   for c in (scores.paired(a, b, m) for m in scores.PAIRED) if c]
    return _print(args, col.name, results, comparisons, empty)


def _none(index: str):
    from ..errors import Medr2Error

    raise Medr2Error(f"index {index!r} holds no test collection with relevance judgements: give --collection")


def _print(args, collection: str, results, comparisons, empty: set) -> int:
    import sys

    from ..evidence.scores import MEASURES

    for run, stage in sorted(empty):
        print(f"warning: {run}: stage {stage} ranked no document for any question: its scores are 0", file=sys.stderr)
    if args.json:
        emit_json(args, {"collection": collection, "scores": [
            {"run": r.run, "stage": r.stage, "n": r.n, **{m: round(v, 4) for m, v in r.means.items()},
             **({"empty": True} if (r.run, r.stage) in empty else {})}
            for r in results],
            "paired": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in c.items()} for c in comparisons]},
            indent=1)
        return 0
    print(f"evidence against {collection}:\n")
    shown = list(MEASURES) + [m for m in (results[0].means if results else {}) if m not in MEASURES]
    print("| run | stage | n | " + " | ".join(shown) + " |\n|" + "---|" * (len(shown) + 3))
    for r in results:
        stage = f"{r.stage} (empty: ranked nothing)" if (r.run, r.stage) in empty else r.stage
        print(f"| {r.run} | {stage} | {r.n} | " + " | ".join(f"{r.means.get(m, 0.0):.3f}" for m in shown) + " |")
    if comparisons:
        print("\npaired (b − a, same questions, bootstrap 95% CI):\n\n| stage | measure | a | b | n | Δ | 95% CI |\n"
              "|---|---|---|---|---|---|---|")
        for c in comparisons:
            print(f"| {c['stage']} | {c['measure']} | {c['a']} | {c['b']} | {c['n']} | {c['diff']:+.3f} | "
                  f"[{c['low']:+.3f}, {c['high']:+.3f}] |")
    return 0
