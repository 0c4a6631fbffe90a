"""``medr2 index build|info|search``: evidence indexes built from recipes in ``index/``."""

from __future__ import annotations

import argparse

from .output import emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = sub.add_parser("build", help="build (or resume building) an index from a recipe",
                           description="Recipes: a YAML path, or a name from index/ (textbooks, textbooks_demo, "
                           "textbooks_bge, medcorp). Built indexes live in $MEDR2_CACHE_DIR/indexes/<name>/.")
    build.add_argument("recipe", help="recipe name or YAML path")
    build.add_argument("--lenient", action="store_true", help="skip and count bad input instead of failing")
    build.add_argument("--corpus-only", action="store_true", help="read, segment and store the corpus, then stop "
                       "(once, before the --shard parts)")
    build.add_argument("--shard", metavar="I/N", help="encode only dense and SPLADE shards I, I+N, ... into the shared "
                       "index folder (one node of a Slurm array or a Ray job; run --corpus-only first, and "
                       "`medr2 index build RECIPE` after every part to train, fill and write the manifest)")
    build.add_argument("--threads", type=int, help="Lucene indexing threads (pyserini backends; default: every core; "
                       "not with --corpus-only or --shard)")
    build.add_argument("--heap-mb", type=int, help="the JVM's heap bound in MB for Lucene builds, half of "
                       "it Lucene's indexing buffer (default: 1024; peak RSS stays near it at any corpus "
                       "size; not with "
                       "--corpus-only or --shard)")
    build.add_argument("--workers-per-gpu", type=int, help="encoding processes on each local GPU (default: 1; on "
                       "an H200, 2 encoded dense passages 1.8x faster; SPLADE uses them on several GPUs, one GPU runs "
                       "it in one process; not with --corpus-only)")
    info = sub.add_parser("info", help="print an index's manifest summary")
    info.add_argument("name", help="index name or folder")
    info.add_argument("--json", action="store_true", help="print the whole manifest")
    search = sub.add_parser("search", help="hybrid search")
    search.add_argument("name", help="index name or folder")
    search.add_argument("query", nargs="+", help="query text (several queries are searched as one batch)")
    search.add_argument("-k", type=int, default=10, help="per-retriever top k (union) or final k (rrf)")
    search.add_argument("--fusion", choices=["union", "rrf"], default="union")
    search.add_argument("--unit", choices=["passage", "document"], default="passage")
    search.add_argument("--retrievers", help="comma-separated subset of dense,bm25,splade (default: all built)")
    search.add_argument("--exclude-pmid", action="append", help="exclude this PMID's article (one per query)")
    search.add_argument("--json", action="store_true", help="print hits as JSON")


def run(args: argparse.Namespace) -> int:
    if args.action == "build":
        import dataclasses

        from ..corpus.recipe import load_recipe
        from ..errors import Medr2Error
        from ..retrieve.build import Resources, build, build_corpus, build_part, index_dir

        try:
            given = {"heap_mb": args.heap_mb, "workers_per_gpu": args.workers_per_gpu}
            resources = Resources(threads=args.threads, **{k: v for k, v in given.items() if v is not None})
        except ValueError as exc:
            raise Medr2Error(f"medr2 index build: {exc}") from None
        if (args.corpus_only or args.shard) and (args.threads is not None or args.heap_mb is not None):
            # the corpus stage and the dense/SPLADE shards start no JVM: the flags would change nothing
            raise Medr2Error("medr2 index build: --threads and --heap-mb size the Lucene builds, which run in the "
                             "final `medr2 index build RECIPE` (not with --corpus-only or --shard)")
        if args.corpus_only and args.workers_per_gpu is not None:
            raise Medr2Error("medr2 index build: --workers-per-gpu sizes the dense and SPLADE encoding, which "
                             "--corpus-only does not run")
        recipe = load_recipe(args.recipe)
        if args.lenient:
            recipe = dataclasses.replace(recipe, strict=False)
        if args.corpus_only:
            build_corpus(recipe, index_dir(recipe.name) / "corpus")
        elif args.shard:
            from ..prepass.prepare import Shard

            shard = Shard.parse(args.shard)
            build_part(recipe, (shard.index, shard.count), resources=resources)
        else:
            build(recipe, resources=resources)
        return 0
    if args.action == "info":
        from pathlib import Path

        from ..retrieve.build import index_dir, load_manifest

        folder = Path(args.name) if Path(args.name, "manifest.json").exists() else index_dir(args.name)
        manifest = load_manifest(folder)
        if args.json:
            emit_json(args, manifest)
            return 0
        print(f"index     {manifest['name']}  ({folder})")
        print(f"recipe    {manifest['recipe_hash'][:16]}  corpus {manifest['corpus_hash'][:16]}")
        print(f"counts    {manifest['counts']}  skipped {manifest['skipped'] or 'none'}")
        for i, entry in enumerate(manifest.get("inputs", [])):
            print(f"{'inputs' if i == 0 else '':<9} {entry['file']}  {entry['size']} bytes  sha256 "
                  f"{entry['sha256'][:16]}")
        if "dense" in manifest:
            d = manifest["dense"]
            print(f"dense     {d['encoder']['id']}@{d['encoder']['revision']} ({d['encoder']['pooling']} pooling, "
                  f"{d['encoder']['dim']} dims), FAISS {d['factory']}, {d['ntotal']} vectors")
        for name in ("bm25", "splade"):
            if name in manifest:
                print(f"{name:<9} {manifest[name]}")
        return 0
    from ..retrieve.searcher import Searcher

    retrievers = tuple(args.retrievers.split(",")) if args.retrievers else None
    searcher = Searcher.open(args.name, retrievers=retrievers)
    results = searcher.search(args.query, k=args.k, unit=args.unit, fusion=args.fusion,
                              exclude_pmids=args.exclude_pmid)
    if args.json:
        emit_json(args, [{"query": q, "hits": [h.to_json() for h in hits]} for q, hits in zip(args.query, results)])
        return 0
    for query, hits in zip(args.query, results):
        print(f"# {query}")
        for i, h in enumerate(hits, 1):
            scores = " ".join(f"{k}={v:.3f}" for k, v in h.scores.items())
            book = h.meta.get("book", "")
            print(f"{i:>3}. {h.doc_id} [{h.source_type}{' ' + book if book else ''}] {scores}")
            print(f"     {h.text[:160].replace(chr(10), ' ')}")
    return 0
