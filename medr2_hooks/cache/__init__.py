"""On-disk stage cache: every expensive stage output is stored under a key of its inputs and configuration.

One SQLite file (``$MEDR2_CACHE_DIR/stages.sqlite`` by default) holds rows ``(stage, key, config, value)``
with JSON values — never pickles. Rows are committed as each batch is produced, so a killed run resumes
where it stopped. A row whose JSON does not parse, whose value has not the stage's declared shape, or whose
stored config differs from the caller's, counts as a miss (``corrupt`` / ``foreign`` in
:attr:`StageCache.stats`) and is recomputed and overwritten.

Several processes on one host may share the cache file (parallel sweeps, local shards): SQLite's write-ahead
log lets them read while one writes, and a writer waits up to ``BUSY_TIMEOUT_S`` for the lock. The write-ahead
log needs shared memory, so it works only among processes of one host ("WAL does not work over a network
filesystem", sqlite.org/wal.html). Shards that may run on other nodes (a Slurm array, Ray workers) therefore
each write a *segment* of their own, ``stages.sqlite.segments/<name>.sqlite`` (rollback journal, one writer),
and read the main file as immutable (no lock, no ``-shm``; it is written only between sharded runs); the
assembly merges the segments into the main file (:meth:`StageCache.merge_segments`). A file that is not
a database (damaged, or something else at that path) is moved aside to ``<name>.damaged-<time>`` with a
warning naming both files, counted as ``cache_file:damaged``, and a fresh cache is started.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import logging
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .. import settings
from ..errors import Medr2Error
from ..fs import safe_component

log = logging.getLogger(__name__)
BUSY_TIMEOUT_S = 600.0


def conforms(value: Any, shape: Any) -> bool:
    """Whether a cached JSON value has a stage's declared shape: ``None`` (anything), a type (``float``
    accepts ints, never bools), a tuple of alternatives, ``[shape]`` (a list of such elements) or
    ``{key: shape}`` (a mapping with at least these keys)."""
    if shape is None:
        return True
    if isinstance(shape, tuple):
        return any(conforms(value, s) for s in shape)
    if isinstance(shape, list):
        return isinstance(value, list) and all(conforms(v, shape[0]) for v in value)
    if isinstance(shape, dict):
        return isinstance(value, dict) and all(k in value and conforms(value[k], s) for k, s in shape.items())
    if shape is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if shape is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if shape is type(None):
        return value is None
    return isinstance(value, shape)


def stable_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


class StageCache:
    """The stage cache at ``path`` (default ``$MEDR2_CACHE_DIR/stages.sqlite``); with ``segment``, a shard's view
    of it: reads the segment, then the main file (immutable); writes only the segment."""

    def __init__(self, path: str | Path | None = None, segment: str | None = None):
        self.path = Path(path) if path else settings.cache_dir() / "stages.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.stats: Counter = Counter()
        self._main: sqlite3.Connection | None = None
        self.write_path = self.path
        if segment is not None:
            self.write_path = self.segments_dir / f"{safe_component(segment, 'cache segment')}.sqlite"
            self.write_path.parent.mkdir(exist_ok=True)
            if self.path.is_file():
                self._main = sqlite3.connect(f"{self.path.resolve().as_uri()}?immutable=1", uri=True,
                                             check_same_thread=False)
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            if "not a database" not in str(exc) and "malformed" not in str(exc):
                raise Medr2Error(f"stage cache {self.write_path}: {exc}") from None
            self._db = self._open(self._move_aside(exc))

    @property
    def segments_dir(self) -> Path:
        return self.path.with_name(self.path.name + ".segments")

    def _open(self, _after: object = None) -> sqlite3.Connection:
        db = sqlite3.connect(self.write_path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        try:
            db.execute("PRAGMA journal_mode=" + ("WAL" if self.write_path == self.path else "DELETE"))
            db.execute("CREATE TABLE IF NOT EXISTS stage (stage TEXT, key TEXT, config TEXT, value TEXT, "
                       "PRIMARY KEY (stage, key))")
            db.execute("SELECT count(*) FROM (SELECT 1 FROM stage LIMIT 1)").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _move_aside(self, exc: Exception) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = self.write_path.with_name(f"{self.write_path.name}.damaged-{stamp}-{os.getpid()}")
        try:
            os.replace(self.write_path, aside)
        except FileNotFoundError:  # another process moved it first
            pass
        for suffix in ("-wal", "-shm", "-journal"):
            Path(f"{self.write_path}{suffix}").unlink(missing_ok=True)
        log.warning("stage cache %s is damaged (%s): moved it to %s and started an empty cache; every stage "
                    "is recomputed (delete the damaged copy once you no longer need it)", self.write_path, exc, aside)
        self.stats["cache_file:damaged"] += 1
        return aside

    def key(self, inputs: Any, config: Any) -> str:
        return stable_hash({"inputs": inputs, "config": config})

    def keys(self, inputs: list[Any], config: Any) -> list[str]:
        """The keys of one call's inputs (:meth:`cached` reads them here)."""
        return [self.key(x, config) for x in inputs]

    def get_many(self, stage: str, keys: list[str], config: Any, shape: Any = None) -> dict[str, Any]:
        cfg = stable_hash(config)
        found: dict[str, Any] = {}
        rows = self._rows(self._db, stage, keys)
        if self._main is not None:
            seen = {row[0] for row in rows}
            rows += self._main_rows(stage, [k for k in keys if k not in seen])
        for key, row_cfg, value in rows:
            if row_cfg != cfg:
                self.stats[f"{stage}:foreign"] += 1
                continue
            try:
                decoded = json.loads(value)
            except json.JSONDecodeError:
                self.stats[f"{stage}:corrupt"] += 1
                continue
            if conforms(decoded, shape):
                found[key] = decoded
            else:
                self.stats[f"{stage}:corrupt"] += 1
        self.stats[f"{stage}:hit"] += len(found)
        self.stats[f"{stage}:miss"] += len(set(keys)) - len(found)
        return found

    @staticmethod
    def _rows(db: sqlite3.Connection, stage: str, keys: list[str]) -> list[tuple]:
        rows: list[tuple] = []
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            rows += db.execute(
                f"SELECT key, config, value FROM stage WHERE stage = ? AND key IN ({','.join('?' * len(chunk))})",
                [stage, *chunk]).fetchall()
        return rows

    def _main_rows(self, stage: str, keys: list[str]) -> list[tuple]:
        """A segment's reads of the main file: one that cannot be read (no table yet, or being written now, which
        sharded runs must not overlap) is a miss, said once."""
        try:
            return self._rows(self._main, stage, keys)
        except sqlite3.DatabaseError as exc:
            log.warning("stage cache %s: cannot read it beside segment %s (%s); this process computes what it "
                        "would have found there", self.path, self.write_path.name, exc)
            self.stats["cache_file:main_unreadable"] += 1
            self._main.close()
            self._main = None
            return []

    def merge_segments(self) -> int:
        """Copy every shard segment's rows into the main file, then delete the segment; the rows copied. Run it
        when no shard is writing (the assembly after an array)."""
        if self.write_path != self.path:
            raise Medr2Error(f"stage cache {self.write_path}: a segment cannot merge segments")
        copied = 0
        for segment in sorted(self.segments_dir.glob("*.sqlite")) if self.segments_dir.is_dir() else []:
            with self._lock:
                attached = False
                try:  # a truncated or foreign file fails at ATTACH or at the first read: the same message
                    self._db.execute("ATTACH DATABASE ? AS segment", (str(segment),))
                    attached = True
                    self._db.execute("BEGIN")
                    copied += self._db.execute("INSERT OR REPLACE INTO main.stage SELECT * FROM segment.stage").rowcount
                    self._db.execute("COMMIT")
                except sqlite3.DatabaseError as exc:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise Medr2Error(f"stage cache segment {segment}: cannot merge it into {self.path} ({exc}); "
                                     "move it aside to go on without its rows") from None
                finally:
                    if attached:
                        self._db.execute("DETACH DATABASE segment")
            segment.unlink()
            log.info("stage cache: merged segment %s into %s", segment.name, self.path)
        return copied

    def put_many(self, stage: str, items: dict[str, Any], config: Any) -> None:
        cfg = stable_hash(config)
        rows = [(stage, k, cfg, json.dumps(v, ensure_ascii=False)) for k, v in items.items()]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO stage VALUES (?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")

    def cached(self, stage: str, inputs: list[Any], config: Any, compute, batch_size: int = 64,
               shape: Any = None, keep=None) -> list[Any]:
        """Values for ``inputs`` in order; misses are computed with ``compute(list_of_inputs) -> list`` in
        batches and stored after each batch. ``shape`` (see :func:`conforms`) is what a stored value must look
        like to be used; computed values are checked against it too. ``keep(input, value) -> bool``: a computed
        value it refuses (an empty or unreadable reply) is returned but never stored, so the next run asks again."""
        keys = self.keys(inputs, config)
        found = self.get_many(stage, list(dict.fromkeys(keys)), config, shape)
        missing = [i for i, k in enumerate(keys) if k not in found]
        todo: dict[str, Any] = {}
        for i in missing:
            todo.setdefault(keys[i], inputs[i])
        todo_keys = list(todo)
        from tqdm.auto import tqdm

        batches = range(0, len(todo_keys), batch_size)
        for start in tqdm(batches, desc=f"{stage} ({len(todo_keys)} to compute)", unit="batch",
                          disable=len(batches) < 2, leave=False):
            chunk = todo_keys[start:start + batch_size]
            values = compute([todo[k] for k in chunk])
            if len(values) != len(chunk):
                raise RuntimeError(f"stage {stage}: computed {len(values)} values for {len(chunk)} inputs")
            produced = dict(zip(chunk, values))
            # the same JSON round trip a later cache hit goes through, so both runs see identical values
            decoded = json.loads(json.dumps(produced, ensure_ascii=False))
            bad = [v for v in decoded.values() if not conforms(v, shape)]
            if bad:
                raise RuntimeError(f"stage {stage}: computed a value of the wrong shape: {bad[0]!r:.200}")
            stored = produced if keep is None else {k: v for k, v in produced.items() if keep(todo[k], decoded[k])}
            self.put_many(stage, stored, config)
            found.update(decoded)
        return [found[k] for k in keys]

    def close(self) -> None:
        self._db.close()
        if self._main is not None:
            self._main.close()
