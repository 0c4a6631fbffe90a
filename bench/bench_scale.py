"""Corpus-scale benchmark (issue 16): synthetic corpora of N snippet-length documents through the index build,
stage by stage, each stage in its own process so its peak RSS is its own.

    python bench/bench_scale.py [--sizes 10000,100000,1000000] [--workdir DIR] [--queries 256] [--json]
                                [--stages generate,corpus,bm25,search,dense,dense_search,splade,splade_search]
                                [--bm25-backend pyserini [--heap-mb MB]]

Per N it prints seconds, documents/s and peak RSS for: generate (write the JSONL), corpus (read, segment and
write the corpus store in bounded batches), bm25 (streamed bm25s build, or Lucene's), dense (a tiny local
encoder, so encoding cost does not hide the rest: shards, then FAISS IVF-PQ trained on a sample and filled shard by
shard) and splade (a tiny masked LM, shard by shard), each reusing the corpus; and the search latency (p50 of
batches of --queries queries, ours and the raw library timed in turns) of our searcher against the fastest raw path
on the same saved index (bm25s' numba backend on every core; FAISS with the same query encoder; a scipy CSR product
for SPLADE), with the speed ratio (goal >= 0.9) and whether the top-k is identical. The tiny models are
random-weight BERTs (2 layers) over MiniLM's tokenizer, written once into the workdir. Documents are ~200 words
drawn from a MedQA textbook's word distribution (medr2_hooks.corpus.synthetic); segmentation counts
whitespace tokens, so encoder tokenisation does not hide the rest. Goals: time ~linear (1M/100k <= 12x), corpus
and bm25 peak RSS <= 1.5x from 100k to 1M (plus the index itself), search at >= 0.9x the raw library's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


STAGES = ("generate", "corpus", "bm25", "search", "dense", "dense_search", "splade", "splade_search")


def _recipe(folder: Path, backend: str, retriever: str = "bm25", n_passages: int = 0):
    from medr2_hooks.corpus.recipe import BM25, Dense, Recipe, Source, Splade
    from medr2_hooks.corpus.segment import Segmentation

    nlist = int(min(65536, max(64, 4 * n_passages ** 0.5)))  # FAISS's rule of thumb: 4-16 x sqrt(N) lists
    if retriever == "bm25":
        retrievers = {"bm25": BM25(backend=backend)}
    elif retriever == "dense":
        retrievers = {"dense": Dense(encoder=_tiny_models(folder.parent)[0], max_length=128, batch_size=256,
                                     shard_size=65536, factory=f"IVF{nlist},PQ16", train_size=50_000)}
    else:
        retrievers = {"splade": Splade(model=_tiny_models(folder.parent)[1], max_length=128, query_max_length=64,
                                       batch_size=64, shard_size=65536)}
    return Recipe(name="scale", sources=[Source(reader="generic_jsonl", paths="docs.jsonl", base=str(folder))],
                  segmentation=Segmentation(tokenizer="whitespace", max_doc_tokens=10_000, passage_tokens=254,
                                            passage_overlap=32), **{"dense": None, "bm25": None, **retrievers})


TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128,
        "max_position_embeddings": 128}
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
             "max_position_embeddings": 512}  # BGE-base, MedCPT, SPLADE-v3
BERT_LARGE = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
              "max_position_embeddings": 512}  # BGE-large (medcorp's dense encoder)


def _tiny_models(root: Path) -> tuple[str, str]:
    """A tiny BERT encoder and masked LM (random weights, seed 0; MiniLM's tokenizer), written once under ``root``."""
    return _random_models(root / "tiny_encoder", TINY, root / "tiny_mlm", TINY)


def _random_models(encoder: Path, encoder_shape: dict, mlm: Path, mlm_shape: dict,
                   tokenizer: str | None = None) -> tuple[str, str]:
    """A BERT encoder and a SPLADE-like masked LM of the given shapes with random weights (seed 0) and the
    tokenizer at ``tokenizer`` (default MiniLM's: BERT's uncased vocabulary), each written once: the cost of
    encoding does not depend on the weights, so these stand in for a checkpoint of that size."""
    if not (mlm / "config.json").exists():
        import torch
        from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

        from medr2_hooks.llm.embedded import resolve

        tokenizer = AutoTokenizer.from_pretrained(tokenizer or resolve("embedded:minilm"))
        for folder, cls, shape in ((encoder, BertModel, encoder_shape), (mlm, BertForMaskedLM, mlm_shape)):
            torch.manual_seed(0)
            model = cls(BertConfig(vocab_size=tokenizer.vocab_size, **shape)).eval()
            if cls is BertForMaskedLM:
                _sparsify(model, tokenizer)
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
    return str(encoder), str(mlm)


def _sparsify(model, tokenizer, active: float = 0.01) -> None:
    """Shift a random MLM head's bias so that ~``active`` of the vocabulary gets a SPLADE weight per passage, as a
    trained SPLADE does (~100-300 terms); unshifted, every term is active and the index is dense."""
    import torch

    from medr2_hooks.corpus.synthetic import documents, word_distribution
    from medr2_hooks import settings

    words = word_distribution(settings.data_dir() / "corpus_textbooks" / "en" / "First_Aid_Step1.txt.gz")
    texts = [d["text"] for d in documents(32, *words, seed=9)]
    batch = tokenizer(texts, truncation=True, max_length=128, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits.masked_fill(~batch["attention_mask"].bool()[..., None], float("-inf"))
        pooled = logits.max(dim=1).values  # SPLADE pools the max over tokens
        model.cls.predictions.bias -= torch.quantile(pooled.flatten(), 1 - active)


def _reuse_corpus(folder: Path, index: Path) -> None:
    """The encoder stages build into their own index folder over the bm25 stage's corpus (linked, not rebuilt)."""
    index.mkdir(parents=True, exist_ok=True)
    if not (index / "corpus").exists():
        (index / "corpus").symlink_to(folder / "index" / "corpus", target_is_directory=True)


class AnonPeak:
    """Peak anonymous memory (RssAnon: heaps, the JVM's included) of this process, sampled every 0.2 s. Peak RSS
    also counts the pages of memory-mapped files (an index being searched or merged), which the kernel can drop."""

    def __init__(self):
        import threading

        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._stop.is_set():
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    self.peak = max(self.peak, int(line.split()[1]))
            self._stop.wait(0.2)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak / 1024, 1)


def _retriever_mb(report: dict, retriever: str) -> float:
    """MB of one retriever's own files in a build report (``bm25/``, ``dense/``, ``splade/``: not the corpus)."""
    return round(sum(v for k, v in report["bytes"].items() if k.startswith(f"{retriever}/")) / 1e6, 1)


def stage(name: str, folder: Path, n: int, queries: int, backend: str = "bm25s", heap_mb: int | None = None) -> dict:
    """One stage in this process; returns its figures (peak RSS is this process's)."""
    anon = AnonPeak()
    t = time.perf_counter()
    out: dict = {"stage": name, "n": n, "bm25_backend": backend}
    index = folder / ("index" if backend == "bm25s" else f"index_{backend}")
    if name == "generate" and (folder / "docs.jsonl").exists():
        out["reused"] = True  # the same seed gives the same file: remove the workdir to write it again
    elif name == "generate":
        from medr2_hooks import settings
        from medr2_hooks.corpus.synthetic import documents, word_distribution, write_jsonl

        words = word_distribution(settings.data_dir() / "corpus_textbooks" / "en" / "First_Aid_Step1.txt.gz")
        write_jsonl(folder / "docs.jsonl", documents(n, *words, seed=0))
    elif name == "corpus":
        from medr2_hooks.retrieve.build import build_corpus

        out["passages"] = build_corpus(_recipe(folder, backend), index / "corpus", log=lambda *_: None)["passages"]
    elif name == "bm25":  # the whole build: the corpus stage finds its store complete and reuses it
        from medr2_hooks.retrieve.build import build

        if backend != "bm25s":
            _reuse_corpus(folder, index)

        from medr2_hooks.retrieve.build import Resources

        resources = Resources(heap_mb=heap_mb) if heap_mb else Resources()
        manifest = build(_recipe(folder, backend), index, log=lambda *_: None, resources=resources)
        out["heap_mb"] = resources.heap_mb if backend != "bm25s" else None
        report = json.loads((index / "build_report.json").read_text())
        out.update(passages=manifest["counts"]["passages"], bm25_seconds=report["timings_s"]["bm25"],
                   corpus_reuse_seconds=report["timings_s"]["corpus"],
                   index_mb=_retriever_mb(report, "bm25"))
    elif name == "search":
        out.update(_search(index, queries, backend))
    elif name in ("dense", "splade"):
        from medr2_hooks.retrieve.build import build
        from medr2_hooks.retrieve.shards import CSR, NPY, shard_paths

        _reuse_corpus(folder, folder / f"index_{name}")
        n_passages = json.loads((folder / "index" / "corpus" / "corpus.json").read_text())["passages"]
        recipe = _recipe(folder, backend, name, n_passages)
        # a resumed build encodes only the missing shards: its seconds are for those
        shards = shard_paths(folder / f"index_{name}" / name, n_passages, getattr(recipe, name).shard_size,
                             {"dense": NPY, "splade": CSR}[name])
        out["shards_found"] = sum(path.exists() for path, _, _ in shards)
        build(recipe, folder / f"index_{name}", log=lambda *_: None)
        report = json.loads((folder / f"index_{name}" / "build_report.json").read_text())
        out.update(passages=n_passages, encode_and_index_seconds=report["timings_s"][name],
                   index_mb=_retriever_mb(report, name))
    elif name in ("dense_search", "splade_search"):
        out.update(_search_encoded(folder / f"index_{name.split('_')[0]}", name.split("_")[0], queries))
    out["seconds"] = round(time.perf_counter() - t, 2)
    out["docs_per_s"] = round(n / out["seconds"], 1) if not name.endswith("search") and not out.get("reused") else None
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out["peak_anon_mb"] = anon.stop()
    return out


ROUNDS = 3  # at least this many rounds, ours and the raw library in turns, and until each side has run 1 s


def _timed(batches: list[list[str]], ours, raw) -> dict:
    """Seconds a batch of ours and of the raw library (the median round over its batches), the two taking turns round
    after round (bench/timing.py), and their speed ratio per round (raw over ours; the goal is >= 0.9): median and
    min-max."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from timing import interleaved, median_seconds, ratio

    t = interleaved({"ours": lambda: [ours(b) for b in batches], "raw": lambda: [raw(b) for b in batches]},
                    min_rounds=ROUNDS)
    speed = ratio(t, "raw", "ours")
    return {"p50_s": round(median_seconds(t, "ours") / len(batches), 4),
            "raw_p50_s": round(median_seconds(t, "raw") / len(batches), 4),
            "speed_ratio": round(speed["median"], 2), "speed_ratio_range": [round(speed["min"], 2),
                                                                            round(speed["max"], 2)],
            "rounds": speed["rounds"]}


def _questions(queries: int) -> list[list[str]]:
    from medr2_hooks import data

    texts = [r.question for r in data.load("medqa_usmle")[: 3 * queries]]
    return [texts[i:i + queries] for i in range(0, len(texts), queries)]


def _search(index: Path, queries: int, backend: str) -> dict:
    import bm25s
    import numpy as np

    from medr2_hooks.retrieve.searcher import Searcher
    from medr2_hooks.retrieve.sparse import bm25_tokenize

    batches = _questions(queries)
    searcher = Searcher.open(index)
    searcher.search(batches[0][:2], k=10)  # warm: numba compile, index pages
    if backend != "bm25s":  # Lucene: no raw bm25s index to compare with
        times = []
        for batch in batches:
            t = time.perf_counter()
            searcher.search(batch, k=10)
            times.append(time.perf_counter() - t)
        return {"queries": queries, "p50_s": round(float(np.median(times)), 4)}
    # the fastest raw path, as our searcher runs it: bm25s' numba backend on every core
    raw_index = bm25s.BM25.load(str(index / "bm25"), mmap=True, backend="numba")

    def raw(batch):
        return raw_index.retrieve(bm25_tokenize(batch), k=10, show_progress=False, n_threads=-1)

    raw(batches[0][:2])
    out = {"queries": queries, **_timed(batches, lambda b: searcher.search(b, k=10), raw)}
    rows, scores = raw(batches[-1])
    hits = searcher.search(batches[-1], k=10)
    out["identical_top_k"] = all([h.passage for h in q] == r[s > 0].tolist() and
                                 np.allclose([h.scores["bm25"] for h in q], s[s > 0], rtol=0, atol=1e-5)
                                 for q, r, s in zip(hits, rows, scores))
    return out


def _search_encoded(index: Path, retriever: str, queries: int) -> dict:
    """p50 of our Searcher (query encoding, search) against the raw library on the same index and the same query
    encoder: FAISS ``search`` (nprobe as ours) or a scipy CSR product with an argpartition top-k."""
    import numpy as np

    from medr2_hooks.retrieve.searcher import Searcher

    batches = _questions(queries)
    searcher = Searcher.open(index, retrievers=(retriever,))
    searcher.search(batches[0][:2], k=10)  # warm: models, index pages
    if retriever == "dense":
        import faiss

        from medr2_hooks.corpus.recipe import Dense

        raw_index = faiss.read_index(str(index / "dense" / "index.faiss"))
        faiss.extract_index_ivf(raw_index).nprobe = Dense.nprobe
        encoder = searcher.query_encoder()

        def raw_search(batch):
            scores, rows = raw_index.search(encoder.encode_queries(batch), 10)
            return rows, scores
    else:
        from medr2_hooks.retrieve.sparse import SpladeEncoder, load_csr_shards

        cfg = searcher.manifest["recipe"]["splade"]
        encoder = SpladeEncoder(cfg["model"], cfg["max_length"], cfg["query_max_length"], cfg["batch_size"])
        matrix = load_csr_shards(index / "splade", encoder.vocab_size).T.tocsr()

        def raw_search(batch):
            scores = (encoder.encode(batch, query=True) @ matrix).toarray()  # the dense [queries x passages] matrix
            top = np.argpartition(-scores, 10, axis=1)[:, :10]
            order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
            rows = np.take_along_axis(top, order, axis=1)
            return rows, np.take_along_axis(scores, rows, axis=1)
    out = {"queries": queries, **_timed(batches, lambda b: searcher.search(b, k=10), raw_search)}
    rows, scores = raw_search(batches[-1])
    hits = searcher.search(batches[-1], k=10)
    # the same top-k scores (rows with equal scores may come in another order)
    out["identical_top_k"] = all(np.allclose(sorted((h.scores[retriever] for h in q), reverse=True),
                                             np.sort(s[r >= 0])[::-1], rtol=1e-5, atol=1e-5)
                                 for q, r, s in zip(hits, rows, scores))
    out["same_rows"] = all({h.passage for h in q} == set(r[r >= 0].tolist()) for q, r in zip(hits, rows))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--workdir", help="where the corpora go (default: a temporary folder, removed after)")
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--bm25-backend", choices=["bm25s", "pyserini"], default="bm25s",
                        help="pyserini: Lucene's multithreaded indexer (the sparse extra and Java 21)")
    parser.add_argument("--heap-mb", type=int, help="Lucene's JVM heap (half of it the indexing buffer; default "
                        "medr2's 1024): a small one fills the buffer at 100k too, so RSS is compared at the bound")
    parser.add_argument("--stages", default=",".join(STAGES[:4]),
                        help=f"comma-separated, in order (default: %(default)s; all: {','.join(STAGES)})")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:  # a child: one stage, its figures as the last stdout line
        print(json.dumps(stage(args.stage, Path(args.folder), args.n, args.queries, args.bm25_backend, args.heap_mb)))
        return 0
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="medr2_scale_"))
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        folder = root / f"n{n}"
        folder.mkdir(parents=True, exist_ok=True)
        for name in args.stages.split(","):
            done = subprocess.run([sys.executable, __file__, "--stage", name, "--n", str(n), "--folder", str(folder),
                                   "--queries", str(args.queries), "--bm25-backend", args.bm25_backend,
                                   *(["--heap-mb", str(args.heap_mb)] if args.heap_mb else [])],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stderr[-4000:])
                return done.returncode
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr)
    if not args.workdir:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'N':>9} {'stage':<13} {'seconds':>9} {'docs/s':>9} {'peak RSS MB':>12} {'anon MB':>8}  "
          "search p50 a batch (ours / raw library)")
    for r in rows:
        extra = ""
        if r["stage"].endswith("search"):
            raw = r.get("raw_p50_s")
            extra = (f"{r['p50_s']:.3f} s / {raw:.3f} s: speed {r['speed_ratio']}x ({r['speed_ratio_range'][0]}-"
                     f"{r['speed_ratio_range'][1]}, {r['rounds']} rounds; goal >= 0.9), identical top-k "
                     f"{r['identical_top_k']}" if raw is not None else f"{r['p50_s']:.3f} s (Lucene)")
        print(f"{r['n']:>9} {r['stage']:<13} {r['seconds']:>9} {r['docs_per_s'] or '':>9} {r['peak_rss_mb']:>12} "
              f"{r['peak_anon_mb']:>8}  {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
