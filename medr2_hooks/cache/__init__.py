"""On-disk stage cache: every expensive stage output is stored under a key of its inputs and configuration.

One SQLite file (``$MEDR2_CACHE_DIR/stages.sqlite`` by default) holds rows ``(stage, key, config, value)``
with JSON values — never pickles. Rows are committed as each batch is produced, so a killed run resumes
where it stopped. A row whose JSON does not parse, or whose stored config differs from the caller's, counts
as a miss (``corrupt`` / ``foreign`` in :attr:`StageCache.stats`) and is recomputed and overwritten.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from .. import settings


def stable_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


class StageCache:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else settings.cache_dir() / "stages.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS stage (stage TEXT, key TEXT, config TEXT, value TEXT, "
                         "PRIMARY KEY (stage, key))")
        self._lock = threading.Lock()
        self.stats: Counter = Counter()

    def key(self, inputs: Any, config: Any) -> str:
        return stable_hash({"inputs": inputs, "config": config})

    def get_many(self, stage: str, keys: list[str], config: Any) -> dict[str, Any]:
        cfg = stable_hash(config)
        found: dict[str, Any] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            rows = self._db.execute(
                f"SELECT key, config, value FROM stage WHERE stage = ? AND key IN ({','.join('?' * len(chunk))})",
                [stage, *chunk]).fetchall()
            for key, row_cfg, value in rows:
                if row_cfg != cfg:
                    self.stats[f"{stage}:foreign"] += 1
                    continue
                try:
                    found[key] = json.loads(value)
                except json.JSONDecodeError:
                    self.stats[f"{stage}:corrupt"] += 1
        self.stats[f"{stage}:hit"] += len(found)
        self.stats[f"{stage}:miss"] += len(set(keys)) - len(found)
        return found

    def put_many(self, stage: str, items: dict[str, Any], config: Any) -> None:
        cfg = stable_hash(config)
        rows = [(stage, k, cfg, json.dumps(v, ensure_ascii=False)) for k, v in items.items()]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO stage VALUES (?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")

    def cached(self, stage: str, inputs: list[Any], config: Any, compute, batch_size: int = 64) -> list[Any]:
        """Values for ``inputs`` in order; misses are computed with ``compute(list_of_inputs) -> list`` in
        batches and stored after each batch."""
        keys = [self.key(x, config) for x in inputs]
        found = self.get_many(stage, list(dict.fromkeys(keys)), config)
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
            self.put_many(stage, produced, config)
            # the same JSON round trip a later cache hit goes through, so both runs see identical values
            found.update(json.loads(json.dumps(produced, ensure_ascii=False)))
        return [found[k] for k in keys]

    def close(self) -> None:
        self._db.close()
