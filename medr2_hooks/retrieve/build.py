"""Resumable index builds from a recipe.

    <cache>/indexes/<name>/
        corpus/          documents, passages (corpus.json marks the stage done)
        dense/           emb-*.npy shards (shards.json: their identity), index.faiss
        bm25/            bm25s index (or bm25/lucene/: Lucene index, backend pyserini)
        splade/          splade-NNNNN.npz (CSR shards) (+ splade/lucene/: impact index, index pyserini)
        manifest.json    recipe, hashes, encoder fingerprint, factory, counts, file hashes (written last)
        build_report.json  stage timings, peak RSS, bytes, skipped input (not part of the index identity)

Every file is written to a temporary name and renamed, and each stage checks what is already done, so a build
killed at any point and restarted ends with the same bytes as an uninterrupted one.
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path


from .. import settings
from ..corpus import segment
from ..corpus.document import Document, SkipReport
from ..corpus.recipe import Recipe
from ..corpus.sources import READERS, source_files
from ..errors import DataError
from ..fs import read_json, safe_component, write_json
from ..corpus.store import CorpusStore, PmidLookupWriter, SeenIds, file_sha256, write_corpus
from .lucene import DEFAULT_HEAP_MB


# Lucene indexes (pyserini backends) live in a "lucene" folder under their retriever; their segment files carry
# random ids, so the manifest identifies them by the hash of their input instead of their bytes.
LUCENE = "lucene"
CORPUS_BATCH = 2048  # source documents read, segmented and written together: the corpus stage's memory bound
# bm25s scores the whole corpus in memory: measured ~5.6 KB a passage at its build's peak (1.14M passages: 6.4 GB,
# bench/bench_scale.py); past a million passages a build says so and names the Lucene backend.
BM25S_LARGE, BM25S_BYTES_PER_PASSAGE = 1_000_000, 5_600


@dataclass(frozen=True)
class Resources:
    """How much of the machine a build may use; not part of the index's identity (the same index at any setting).
    ``threads``: Lucene's indexing threads (default: every core); ``heap_mb``: the JVM's heap bound, half of it
    Lucene's indexing buffer; ``workers_per_gpu``: encoding processes on each local GPU (FlagEmbedding's dense
    encoding leaves an H200 idle between batches: two processes encoded 1.8x faster, the same vectors; SPLADE's
    pool gets them where there are several GPUs) (``medr2 index build --threads --heap-mb --workers-per-gpu``)."""

    threads: int | None = None
    heap_mb: int = DEFAULT_HEAP_MB
    workers_per_gpu: int = 1

    def __post_init__(self):
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, found {self.threads}")
        if self.heap_mb < 128:
            raise ValueError(f"heap_mb must be >= 128, found {self.heap_mb}")
        if self.workers_per_gpu < 1:
            raise ValueError(f"workers_per_gpu must be >= 1, found {self.workers_per_gpu}")


def index_dir(name: str) -> Path:
    return settings.cache_dir() / "indexes" / safe_component(name, "index name")


def read_sources(recipe: Recipe, report: SkipReport) -> Iterator[Document]:
    """The recipe's source documents, one at a time (a repeated doc_id is reported and skipped; the ids seen are
    kept in an on-disk table, so memory does not grow with the corpus)."""
    seen = SeenIds()
    try:
        for source in recipe.sources:
            base = recipe.base_dir(source)
            for pattern in source.path_list():
                for doc in READERS[source.reader](pattern, base, report, **source.options):
                    if not seen.add(doc.doc_id):
                        where, _, line = str(doc.meta.get("source", pattern)).rpartition(":")
                        report.problem(base / (where or pattern), int(line) if line.isdigit() else 0, "doc_id",
                                       "duplicate doc_id", doc.doc_id)
                        continue
                    yield doc
    finally:
        seen.close()


def batched(items: Iterable, size: int) -> Iterator[list]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


def input_files(recipe: Recipe, folder: Path) -> list[dict]:
    """Each input file of the recipe's sources with its size and sha256. Hashes are remembered by (path, size,
    mtime) in ``<corpus>/inputs.json``, so an unchanged file is not read again; an edited, replaced or moved
    file gets a new identity and the corpus is rebuilt."""
    memo_path = folder / "inputs.json"
    try:
        memo = {m["path"]: m for m in json.loads(memo_path.read_text())}
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
        memo = {}
    out = []
    for source in recipe.sources:
        base = recipe.base_dir(source)
        for pattern in source.path_list():
            for path in source_files(pattern, base):
                stat = path.stat()
                seen = memo.get(str(path))
                if seen and seen["size"] == stat.st_size and seen["mtime_ns"] == stat.st_mtime_ns:
                    digest = seen["sha256"]
                else:
                    digest = file_sha256(path)
                out.append({"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest})
    folder.mkdir(parents=True, exist_ok=True)
    write_json(memo_path, out, ascii=True)
    return out


def _corpus_identity(recipe: Recipe, inputs: list[dict]) -> str:
    spec = {"sources": [asdict(s) for s in recipe.sources], "segmentation": asdict(recipe.segmentation),
            "strict": recipe.strict, "segmenter_version": segment.SEGMENTER_VERSION,
            "inputs": sorted((Path(i["path"]).name, i["size"], i["sha256"]) for i in inputs)}
    return json.dumps(spec, sort_keys=True)


def built_corpus(recipe: Recipe, folder: Path, inputs: list[dict] | None = None) -> dict | None:
    """The record of the corpus in ``folder`` when it was built from this recipe and these input files, else None."""
    marker = folder / "corpus.json"
    if not marker.exists():  # before hashing the inputs: nothing built, nothing to compare
        return None
    return _marker_with(marker, _corpus_identity(recipe, inputs if inputs is not None else input_files(recipe, folder)))


def _marker_with(marker: Path, identity: str) -> dict | None:
    """The build record in ``marker`` when it was written for ``identity``, else None."""
    if not marker.exists():
        return None
    done = read_json(marker)
    return done if done.get("identity") == identity else None


def build_corpus(recipe: Recipe, folder: Path, log=print) -> dict:
    marker = folder / "corpus.json"
    inputs = input_files(recipe, folder)
    identity = _corpus_identity(recipe, inputs)
    done = _marker_with(marker, identity)
    if done is not None:
        log(f"corpus: up to date ({done['documents']} documents, {done['passages']} passages)")
        return done
    if marker.exists():
        log("corpus: the recipe or an input file changed since the last build: rebuilding")
    report = SkipReport(strict=recipe.strict)
    tokens = segment.Tokens(recipe.segmentation.tokenizer)
    pmids = PmidLookupWriter(folder)
    counts = {"source_documents": 0, "documents": 0}

    def segmented():
        """Read, segment and hand over ``CORPUS_BATCH`` source documents at a time (memory: one batch)."""
        for raw in batched(read_sources(recipe, report), CORPUS_BATCH):
            docs = segment.documents(raw, recipe.segmentation, tokens)
            pmids.add([(str(doc.meta["pmid"]), row) for row, doc in enumerate(docs, counts["documents"])
                       if doc.meta.get("pmid")])
            counts["source_documents"] += len(raw)
            counts["documents"] += len(docs)
            yield docs, segment.passages([d.text for d in docs], recipe.segmentation, tokens)

    corpus_hash, n_docs, n_passages = write_corpus(folder, segmented())
    if not n_docs:
        skipped = (f"; all input was skipped: {dict(report.counts)} (first: {report.examples[0]})"
                   if report.total else "")
        raise DataError(f"index {recipe.name}: the sources yield no document "
                        f"({', '.join(i['path'] for i in inputs)}){skipped}")
    pmids.finish()
    (folder / "lookup.json").unlink(missing_ok=True)  # the table of corpora built before lookup.sqlite
    done = {"identity": identity, "corpus_hash": corpus_hash, "inputs": [{k: i[k] for k in ("path", "size", "sha256")}
                                                                      for i in inputs],
            "source_documents": counts["source_documents"], "documents": n_docs,
            "passages": n_passages, "skipped": report.to_json()}
    write_json(marker, done, sort_keys=True, ascii=True)
    log(f"corpus: {done['source_documents']} source documents -> {n_docs} documents, {n_passages} passages"
        + (f", skipped {report.total}" if report.total else ""))
    return done


def build_dense(recipe: Recipe, store: CorpusStore, folder: Path, corpus_hash: str, log=print,
                part: tuple[int, int] | None = None, resources: Resources = Resources()) -> dict | None:
    from tqdm.auto import tqdm

    from .dense import build_faiss
    from .shards import encode_shards
    from .encoders import DenseEncoder, all_devices

    cfg = recipe.dense
    encoder = DenseEncoder(cfg.encoder, cfg.pooling, cfg.query_instruction, cfg.max_length, cfg.batch_size,
                           device=all_devices(resources.workers_per_gpu))
    check_factory(cfg.factory, encoder.dim, recipe)  # before hours of encoding, not after
    n = len(store.passages)
    identity = {"encoder": encoder.fingerprint, "corpus_hash": corpus_hash, "shard_size": cfg.shard_size}
    with tqdm(total=n, desc="dense: encoding passages", unit="passage", mininterval=5) as bar:
        shards = encode_shards(folder, n, lambda s, e: store.passage_texts(range(s, e)), encoder.encode_corpus,
                               cfg.shard_size, identity, progress=bar, part=part)
    if part is not None:
        log(f"dense: part {part[0]}/{part[1]}: {len(shards)} shards encoded or found")
        return None
    ntotal = build_faiss(shards, encoder.dim, cfg.factory, folder / "index.faiss", cfg.train_size, on_disk=cfg.on_disk)
    log(f"dense: {ntotal} vectors of {encoder.dim} dims, FAISS {cfg.factory}"
        + (" (inverted lists on disk)" * cfg.on_disk))
    return {"encoder": encoder.fingerprint, "factory": cfg.factory, "metric": "inner_product", "ntotal": ntotal,
            "on_disk": cfg.on_disk}


def check_factory(factory: str, dim: int, recipe: Recipe) -> None:
    """A FAISS ``index_factory`` string that FAISS accepts for ``dim``-dimensional vectors, else a ConfigError."""
    import faiss

    from ..config import ConfigError

    try:
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"recipe {recipe.name} ({recipe.folder}): dense.factory {factory!r} is not a FAISS "
                          f"index_factory string for {dim}-dimensional vectors ({first}); e.g. Flat, HNSW32, "
                          "IVF4096,PQ64") from None
    if recipe.dense.on_disk:
        try:
            faiss.extract_index_ivf(index)
        except RuntimeError:
            raise ConfigError(f"recipe {recipe.name} ({recipe.folder}): dense.on_disk keeps IVF inverted lists on "
                              f"disk, but {factory!r} is not an IVF index (e.g. IVF4096,PQ64 or IVF65536,Flat)") \
                from None


def build_sparse_bm25(recipe: Recipe, store: CorpusStore, folder: Path, log=print,
                      resources: Resources = Resources()) -> dict:
    from .sparse import build_bm25

    cfg = recipe.bm25
    n = len(store.passages)
    if cfg.backend == "pyserini":
        from .lucene import build_lucene_bm25
        from .sparse import bm25_tokenize

        folder.mkdir(parents=True, exist_ok=True)
        tokens = (doc for texts in passage_batches(store) for doc in bm25_tokenize(texts, cfg.stopwords))
        lucene = build_lucene_bm25(tokens, folder / LUCENE, resources.threads, resources.heap_mb)
        log(f"bm25: {n} passages (Lucene {lucene['anserini']}, k1={cfg.k1}, b={cfg.b})")
        return {**asdict(cfg), "lucene": lucene}
    if n > BM25S_LARGE:
        log(f"bm25: bm25s builds its index in memory, about {n * BM25S_BYTES_PER_PASSAGE / 1e9:.0f} GB for {n} "
            "passages (bench/bench_scale.py); bm25: {backend: pyserini} builds within --heap-mb")
    build_bm25(passage_batches(store), folder, cfg.k1, cfg.b, cfg.method, cfg.stopwords)
    log(f"bm25: {n} passages (bm25s, k1={cfg.k1}, b={cfg.b})")
    return asdict(cfg)


def passage_batches(store: CorpusStore, size: int = CORPUS_BATCH):
    """The store's passage texts in order, ``size`` at a time (sparse builds never hold them all)."""
    n = len(store.passages)
    for start in range(0, n, size):
        yield store.passage_texts(range(start, min(start + size, n)))


def build_sparse_splade(recipe: Recipe, store: CorpusStore, folder: Path, corpus_hash: str, log=print,
                        part: tuple[int, int] | None = None, resources: Resources = Resources()) -> dict | None:
    """SPLADE weights encoded shard by shard into ``splade/splade-NNNNN.npz`` (CSR; a killed build resumes at the
    next shard; the shards are the index, read together at search time), plus Lucene's impact index when asked."""
    from tqdm.auto import tqdm

    from ..llm.local import weights_revision
    from .encoders import all_devices
    from .shards import CSR, encode_shards
    from .sparse import SpladeEncoder

    cfg = recipe.splade
    devices = all_devices(resources.workers_per_gpu)
    if not isinstance(devices, str) and len(set(devices)) == 1 and devices[0].startswith("cuda"):
        # one GPU: the one-process loop keeps an H200 busy (319 passages/s) where two pool workers do not (267)
        devices = devices[0]
    encoder = SpladeEncoder(cfg.model, cfg.max_length, cfg.query_max_length, cfg.batch_size, device=devices)
    n = len(store.passages)
    identity = {"model": cfg.model, "revision": weights_revision(encoder.tokenizer.name_or_path),
                "max_length": cfg.max_length, "corpus_hash": corpus_hash, "shard_size": cfg.shard_size}
    try:
        with tqdm(total=n, desc="splade: encoding passages", unit="passage", mininterval=5) as bar:
            shards = encode_shards(folder, n, lambda s, e: store.passage_texts(range(s, e)), encoder.encode,
                                   cfg.shard_size, identity, progress=bar, fmt=CSR, part=part)
    finally:
        encoder.close()
    if part is not None:
        log(f"splade: part {part[0]}/{part[1]}: {len(shards)} shards encoded or found")
        return None
    log(f"splade: {n} passages in {len(shards)} shards of {cfg.shard_size}")
    out = {**asdict(cfg), "revision": identity["revision"], "shards": len(shards)}
    if cfg.index == "pyserini":
        from .lucene import build_lucene_impact

        from scipy import sparse

        out["lucene"] = build_lucene_impact((sparse.load_npz(p) for p in shards), encoder.vocabulary(),
                                            folder / LUCENE, cfg.quantization, resources.threads,
                                            resources.heap_mb)
        log(f"splade: Lucene impact index (Anserini {out['lucene']['anserini']}, x{cfg.quantization:g} quantised)")
    return out


def build_part(recipe: Recipe, part: tuple[int, int], folder: Path | None = None, log=print,
               resources: Resources = Resources()) -> dict:
    """One node's share of the encoding (``medr2 index build RECIPE --shard i/n``): the dense and SPLADE shards
    ``i, i + n, …``, written into the shared index folder. The corpus must be built first (``--corpus-only``), once;
    after every part, ``medr2 index build RECIPE`` trains and fills the indexes from the shards and writes the
    manifest a one-machine build writes."""
    from ..errors import Medr2Error

    index, count = part
    if not (count >= 1 and 0 <= index < count):
        raise Medr2Error(f"--shard {index}/{count}: expected i/n with 0 <= i < n")
    folder = folder or index_dir(recipe.name)
    corpus = built_corpus(recipe, folder / "corpus")
    if corpus is None:
        raise Medr2Error(f"index {recipe.name}: no up-to-date corpus in {folder / 'corpus'}; build it once first "
                         f"(medr2 index build {recipe.name} --corpus-only), then the parts")
    store = CorpusStore(folder / "corpus")
    done = {"part": f"{index}/{count}", "passages": corpus["passages"]}
    if recipe.dense:
        build_dense(recipe, store, folder / "dense", corpus["corpus_hash"], log=log, part=part, resources=resources)
        done["dense"] = True
    if recipe.splade:
        build_sparse_splade(recipe, store, folder / "splade", corpus["corpus_hash"], log=log, part=part,
                            resources=resources)
        done["splade"] = True
    store.close()
    return done


def build(recipe: Recipe, folder: Path | None = None, log=print, resources: Resources = Resources()) -> dict:
    """Build (or finish building) the index of ``recipe``; returns the manifest. Shards another node encoded
    (:func:`build_part`) are found on disk and not encoded again, so after every part this is the merge step."""
    folder = folder or index_dir(recipe.name)
    folder.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    def timed(stage, fn, *args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, log=log, **kwargs)
        timings[stage] = round(time.perf_counter() - t, 2)
        return out

    corpus = timed("corpus", build_corpus, recipe, folder / "corpus")
    store = CorpusStore(folder / "corpus")
    manifest = {"name": recipe.name, "recipe": recipe.to_json(), "recipe_hash": recipe.hash(),
                "corpus_hash": corpus["corpus_hash"],
                "counts": {k: corpus[k] for k in ("source_documents", "documents", "passages")},
                "inputs": [{"file": Path(i["path"]).name, "size": i["size"], "sha256": i["sha256"]}
                           for i in corpus["inputs"]],
                "skipped": corpus["skipped"]["skipped"]}
    if recipe.dense:
        manifest["dense"] = timed("dense", build_dense, recipe, store, folder / "dense", corpus["corpus_hash"],
                                  resources=resources)
    if recipe.bm25:
        manifest["bm25"] = timed("bm25", build_sparse_bm25, recipe, store, folder / "bm25", resources=resources)
    if recipe.splade:
        manifest["splade"] = timed("splade", build_sparse_splade, recipe, store, folder / "splade",
                                   corpus["corpus_hash"],
                                   resources=resources)
    store.close()
    on_disk = sorted(p for p in folder.rglob("*") if p.is_file() and ".tmp" not in p.name
                     and p.name not in ("manifest.json", "build_report.json", "inputs.json"))
    files = [p for p in on_disk if LUCENE not in p.relative_to(folder).parts]
    manifest["files"] = {str(p.relative_to(folder)): file_sha256(p) for p in files}
    write_json(folder / "manifest.json", manifest, sort_keys=True, ascii=True)
    # the report's sizes count Lucene's segment files too (the manifest hashes their input instead)
    sizes = {str(p.relative_to(folder)): p.stat().st_size for p in on_disk}
    report = {"timings_s": timings, "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
              "bytes": sizes, "index_bytes": sum(sizes.values()), "skipped": corpus["skipped"]}
    write_json(folder / "build_report.json", report, sort_keys=True, ascii=True)
    log(f"index {recipe.name}: {manifest['counts']['documents']} documents, {manifest['counts']['passages']} passages, "
        f"{report['index_bytes'] / 1e6:.1f} MB in {folder}; stages {timings}; peak RSS {report['peak_rss_mb']:.0f} MB")
    return manifest


def ensure_index(name: str, log=print) -> Path:
    """The folder of index ``name``, building it from its recipe first if it has no manifest yet."""
    from ..corpus.recipe import load_recipe

    folder = index_dir(name)
    if not (folder / "manifest.json").exists():
        build(load_recipe(name), folder, log=log)
    elif _inputs_touched(folder):
        log(f"index {name}: an input file changed size or time since the build: checking it (rebuilt if its "
            "content changed)")
        build(load_recipe(name), folder, log=log)
    return folder


def _inputs_touched(folder: Path) -> bool:
    """Whether an input file recorded at build time is gone or has another size or mtime (a cheap stat check;
    the build then decides by content hash)."""
    try:
        recorded = json.loads((folder / "corpus" / "inputs.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False  # built before inputs were recorded: nothing to compare
    for entry in recorded:
        path = Path(entry["path"])
        if not path.is_file():
            return True
        stat = path.stat()
        if (stat.st_size, stat.st_mtime_ns) != (entry["size"], entry["mtime_ns"]):
            return True
    return False


def load_manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    if not path.exists():
        from ..errors import Medr2Error

        raise Medr2Error(f"no built index in {folder} (manifest.json missing): run medr2 index build <recipe>")
    return read_json(path)


__all__ = ["Resources", "build", "ensure_index", "index_dir", "load_manifest", "read_sources"]
