"""Benchmarks declared in YAML: a question file (CSV, JSONL, JSON or a hub dataset) and a field mapping, no Python.

    name: my_bench                     # tasks my_bench_direct, my_bench_vanilla_rag, …, my_bench_medr2, …
    title: My benchmark (5 options)
    source: {format: csv, path: my_bench/test.csv}      # under MEDR2_DATA_DIR, or absolute
    # or:   {hub: owner/name, config: default, split: test}
    fields: {id: qid, question: question, options: [opa, opb, opc, opd, ope], answer: answer_idx}
    answer_format: letter              # letter | index0 | index1 | text
    language: en
    n_demos: 5                         # CoT demonstrations taken out of the pool (seeded)
    kind: qa                           # qa | clinical

``options`` is a list of columns (labels A, B, … in that order) or one column holding a list or a
``{label: text}`` mapping (in a CSV, as JSON text). A malformed row is a :class:`RowError` naming the file, the
line and the field; with ``lenient: true`` it is skipped and counted instead (:attr:`Loaded.skipped`).
Only ``question`` and ``options`` of a row reach the pipeline (:meth:`Record.public`); other columns (an
explanation, say) are never read.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .. import settings
from ..config import ConfigError, from_dict, load_yaml
from ..errors import DataError, RowError
from .readers import csv_rows, iter_jsonl, read_json
from .record import Record

NAME = re.compile(r"[a-z][a-z0-9_]{1,47}")
LABELS = string.ascii_uppercase
PROMPTS = ("medqa", "medmcqa", "mmlu")  # lm-eval's question layouts (medr2_hooks.apply.prompts)


@dataclass(frozen=True)
class Source:
    """A local file (``format`` + ``path``) or a hub dataset (``hub`` + ``config`` + ``split``)."""

    format: Literal["csv", "jsonl", "json"] | None = None
    path: str | None = None
    hub: str | None = None
    config: str | None = None
    split: str = "test"

    def __post_init__(self):
        if (self.path is None) == (self.hub is None):
            raise ValueError("give exactly one of 'path' (with 'format') and 'hub'")
        if self.path is not None and self.format is None:
            raise ValueError(f"'format' is missing for path {self.path!r}: one of csv, jsonl, json")

    def describe(self) -> str:
        return self.path if self.path else f"{self.hub}:{self.config or 'default'}:{self.split}"


@dataclass(frozen=True)
class Fields:
    question: str
    options: str | list[str]
    answer: str
    id: str | None = None  # default: the row's line number

    def columns(self) -> list[str]:
        opts = [self.options] if isinstance(self.options, str) else list(self.options)
        return [c for c in (self.id, self.question, *opts, self.answer) if c is not None]


@dataclass(frozen=True)
class Declaration:
    name: str
    title: str
    source: Source
    fields: Fields
    answer_format: Literal["letter", "index0", "index1", "text"] = "letter"
    language: str = "en"
    n_demos: int = 5
    kind: Literal["qa", "clinical"] = "qa"
    prompt: Literal["medqa", "medmcqa", "mmlu"] = "medqa"
    lenient: bool = False
    demos: Source | None = None  # demonstrations from their own rows (every source row is then evaluated)
    wraps: str | None = None  # the lm-eval built-in task whose prompt a `medr2 wrap` task keeps
    origin: str = field(default="", compare=False)  # the file it was read from (for messages)

    def __post_init__(self):
        if not NAME.fullmatch(self.name):
            raise ValueError(f"name {self.name!r}: lower-case letters, digits and '_', starting with a "
                             "letter, 2-48 long")
        if self.n_demos < 0:
            raise ValueError(f"n_demos must be >= 0, found {self.n_demos}")
        if isinstance(self.fields.options, list) and not 2 <= len(self.fields.options) <= len(LABELS):
            raise ValueError(f"fields.options: expected 2-26 columns, found {len(self.fields.options)}")

    def to_json(self) -> dict:
        from dataclasses import asdict

        def clean(value):
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items() if v is not None}
            return value

        out = asdict(self)
        out.pop("origin")
        return clean(out)


def parse(raw: dict, where: str) -> Declaration:
    return from_dict(Declaration, {**raw, "origin": where}, where)


def read(path: str | Path) -> Declaration:
    path = Path(path)
    return parse(load_yaml(path, aliases=False), str(path))


@dataclass
class Loaded:
    records: list[Record]
    skipped: list[str]  # "file:line: field 'x' …" of each row left out (lenient only)


def resolve(source: Source) -> Path:
    path = Path(source.path).expanduser()
    if not path.is_absolute():
        root = settings.data_dir()
        if root is None:
            raise DataError(f"{source.path}: a relative source path is read under MEDR2_DATA_DIR, which is not set")
        path = root / path
    if not path.is_file():
        raise DataError(f"missing data file {path} (source.path {source.path!r})")
    return path


def rows(source: Source, columns: list[str], where: str) -> Iterator[tuple[object, int, dict]]:
    """``(file, line, row)`` of every row; a column the mapping names but the file lacks is an error at the header."""
    if source.hub is not None:
        yield from _hub_rows(source, columns, where)
        return
    path = resolve(source)
    if source.format == "csv":
        def check(header: list[str]) -> None:
            missing = [c for c in columns if c not in header]
            if missing:
                raise RowError(path, 1, missing[0], f"is not a column of the header ({', '.join(header)});"
                               f" named in {where} fields")

        checked = False
        for start, row, header in csv_rows(path):  # start: the line a row starts on (a quoted field spans lines)
            if not checked:
                check(header)
                checked = True
            if None in row:
                raise RowError(path, start, None, f"expected {len(header)} fields, found more")
            yield path, start, row
        if not checked:  # no rows: the header alone is still checked
            check(next((row for _, row, _ in csv_rows(path, header=False)), []))
    elif source.format == "jsonl":
        for line, obj in iter_jsonl(path):
            yield path, line, obj
    else:
        data = read_json(path)
        items = data if isinstance(data, list) else None
        if items is None:
            raise DataError(f"{path}: expected a JSON list of objects, found {type(data).__name__}")
        for i, obj in enumerate(items, 1):
            if not isinstance(obj, dict):
                raise RowError(path, i, None, f"expected a JSON object, found {type(obj).__name__}")
            yield path, i, obj


def _hub_rows(source: Source, columns: list[str], where: str):
    import datasets

    label = f"hub:{source.hub}"
    try:
        table = datasets.load_dataset(source.hub, source.config, split=source.split)
    except (OSError, ConnectionError, ValueError, datasets.exceptions.DatasetNotFoundError) as exc:
        raise DataError(f"{where}: source.hub {source.hub!r} (config {source.config!r}, split {source.split!r}) "
                        f"cannot be loaded: {str(exc).splitlines()[0]} — no network? Mirror it to a file and use "
                        f"source.path") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise RowError(label, 0, missing[0], f"is not a column ({', '.join(table.column_names)}); named in {where}")
    for i, row in enumerate(table, 1):
        yield label, i, row


def _options(decl: Declaration, row: dict, path, line: int) -> dict[str, str]:
    spec = decl.fields.options
    if isinstance(spec, list):
        values, names = [row.get(c) for c in spec], list(spec)
    else:
        value = row.get(spec)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise RowError(path, line, spec,
                               "expected a list or a {label: text} mapping (JSON text in a CSV)") from None
        if isinstance(value, dict):
            return {str(k): _text(v, path, line, f"{spec}.{k}") for k, v in value.items()}
        if not isinstance(value, list):
            raise RowError(path, line, spec, f"expected a list or a {{label: text}} mapping, found "
                                             f"{type(value).__name__}")
        values, names = value, [f"{spec}[{i}]" for i in range(len(value))]
    if len(values) > len(LABELS):
        raise RowError(path, line, spec if isinstance(spec, str) else None, f"more than {len(LABELS)} options")
    return {LABELS[i]: _text(v, path, line, n) for i, (v, n) in enumerate(zip(values, names))}


def _text(value: Any, path, line: int, name: str) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowError(path, line, name, "is empty")
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise RowError(path, line, name, f"expected text, found {type(value).__name__}")
    return str(value).strip()


def _answer(decl: Declaration, row: dict, options: dict[str, str], path, line: int) -> str:
    name, value, labels = decl.fields.answer, row.get(decl.fields.answer), list(options)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowError(path, line, name, "is empty")
    fmt = decl.answer_format
    if fmt == "letter":
        answer = str(value).strip()
    elif fmt == "text":
        hits = [k for k, v in options.items() if v == str(value).strip()]
        if len(hits) != 1:
            raise RowError(path, line, name, f"answer text {value!r} matches {len(hits)} of the options "
                                             f"{list(options.values())}")
        answer = hits[0]
    else:
        try:
            index = int(value) - (fmt == "index1")
        except (TypeError, ValueError):
            raise RowError(path, line, name, f"expected an integer ({fmt}), found {value!r}") from None
        answer = labels[index] if 0 <= index < len(labels) else f"#{value}"
    if answer not in labels:
        raise RowError(path, line, name, f"answer {value!r} ({fmt}) is not one of the options {labels}")
    return answer


def record(decl: Declaration, row: dict, path, line: int) -> Record:
    f = decl.fields
    for column in f.columns():
        if column not in row:
            raise RowError(path, line, column, "is missing")
    options = _options(decl, row, path, line)
    return Record(
        id=_text(row.get(f.id), path, line, f.id) if f.id else str(line),
        question=_text(row.get(f.question), path, line, f.question),
        options=options,
        answer=_answer(decl, row, options, path, line),
        language=decl.language,
        meta={"source": f"{Path(str(path)).name}:{line}"},
    )


def load(decl: Declaration, source: Source | None = None) -> Loaded:
    """Every row of ``source`` (default: the declaration's) as a Record; ids must be unique."""
    source = source or decl.source
    records, skipped, first_line = [], [], {}
    for path, line, row in rows(source, decl.fields.columns(), decl.origin or decl.name):
        try:
            rec = record(decl, row, path, line)
            if rec.id in first_line:
                raise RowError(path, line, decl.fields.id or "line",
                               f"duplicate id {rec.id!r} (first on line {first_line[rec.id]})")
        except RowError as exc:
            if not decl.lenient:
                raise
            skipped.append(str(exc))
            continue
        first_line[rec.id] = line
        records.append(rec)
    if not records:
        raise DataError(f"{source.describe()}: no usable rows ({len(skipped)} skipped) for benchmark {decl.name}")
    return Loaded(records, skipped)


def check(decl: Declaration) -> Loaded:
    """Load every row of the evaluation source and the demonstration source: the validation `medr2 benchmark add`
    runs."""
    loaded = load(decl)
    if decl.demos is not None:
        demos = load(decl, decl.demos)
        loaded = Loaded(loaded.records, loaded.skipped + demos.skipped)
        if len(demos.records) < decl.n_demos:
            raise ConfigError(f"{decl.origin}: n_demos {decl.n_demos} but the demos source has "
                              f"{len(demos.records)} rows")
    elif len(loaded.records) <= decl.n_demos:
        raise ConfigError(f"{decl.origin}: n_demos {decl.n_demos} leaves no item of {len(loaded.records)} to evaluate")
    return loaded
