"""Readers for each corpus source type. Each yields :class:`Document` records at the source's natural
granularity (a whole textbook, one JSONL row); :mod:`.segment` splits long ones into chapters.

Problems (invalid UTF-8, invalid JSON, missing or empty fields, a truncated gzip) go to a
:class:`SkipReport`: an error naming file and line in strict mode, a counted skip in lenient mode.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError
from .document import GUIDELINE_LEVEL, Document, SkipReport


def _lines(path: Path, report: SkipReport) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` of a UTF-8 text file (``.gz`` allowed), without line endings."""
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    if path.is_file() and path.stat().st_size == 0:
        report.problem(path, 0, None, "empty file (0 bytes)")
        return
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    yield lineno, raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    report.problem(path, lineno, None, "invalid UTF-8", f"byte {exc.start}")
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        report.problem(path, lineno + 1, None, "truncated or corrupt gzip", str(exc))
    except FileNotFoundError:
        raise DataError(f"corpus source file not found: {path}") from None


def source_files(pattern: str, base: Path) -> list[Path]:
    """The files a source pattern names (a path or a glob, relative to ``base`` unless absolute)."""
    path = Path(pattern)
    root, glob = (path.parent, path.name) if path.is_absolute() else (base, pattern)
    files = sorted(root.glob(glob)) if any(ch in glob for ch in "*?[") else [root / glob]
    if not files or not all(f.exists() for f in files):
        raise DataError(f"corpus source {pattern!r} matches no file under {root}")
    return files


def medqa_textbooks(paths: str, base: Path, report: SkipReport, language: str = "en") -> Iterator[Document]:
    """The MedQA textbooks: one ``book`` document per file (``Anatomy_Gray.txt.gz`` → book ``Anatomy_Gray``)."""
    for path in source_files(paths, base):
        book = path.name.split(".")[0]
        lines = [text for _, text in _lines(path, report)]
        text = "\n".join(lines).strip()
        if not text:
            report.problem(path, 1, None, "empty document")
            continue
        yield Document(doc_id=book, title=book.replace("_", " "), text=text, source_type="book",
                       language=language, meta={"book": book, "source": path.name})


def _jsonl(path: Path, report: SkipReport) -> Iterator[tuple[int, dict]]:
    for lineno, line in _lines(path, report):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            report.problem(path, lineno, None, "invalid JSON", exc.msg)
            continue
        if not isinstance(obj, dict):
            report.problem(path, lineno, None, "invalid JSON", "expected an object")
            continue
        yield lineno, obj


def _text_fields(obj: dict, names: dict[str, str], path: Path, line: int, report: SkipReport,
                 optional: tuple[str, ...] = ()) -> dict[str, str] | None:
    """``{our_name: obj[their_name]}``; a missing or blank required field is reported and gives None."""
    out = {}
    for ours, theirs in names.items():
        value = obj.get(theirs)
        if value is None and ours in optional:
            value = ""
        if not isinstance(value, (str, int)) or (ours not in optional and not str(value).strip()):
            reason = "missing field" if value is None else "empty document" if ours == "text" else "invalid field"
            report.problem(path, line, theirs, reason)
            return None
        out[ours] = str(value)
    return out


def medrag_jsonl(paths: str, base: Path, report: SkipReport, source_type: str = "book",
                 language: str = "en") -> Iterator[Document]:
    """MedRAG corpora (``MedRAG/textbooks``, ``pubmed``, ``wikipedia``): ``id, title, content``."""
    for path in source_files(paths, base):
        for line, obj in _jsonl(path, report):
            f = _text_fields(obj, {"doc_id": "id", "title": "title", "text": "content"}, path, line, report,
                             optional=("title",))
            if f:
                meta = {"source": f"{path.name}:{line}"}
                if source_type == "paper" and obj.get("PMID"):
                    meta["pmid"] = str(obj["PMID"])
                yield Document(source_type=source_type, language=language, meta=meta, **f)


def meditron_guidelines(paths: str, base: Path, report: SkipReport, language: str = "en") -> Iterator[Document]:
    """MEDITRON guidelines (``epfl-llm/guidelines``): ``id, source, title, clean_text``; level fixed at 3."""
    for path in source_files(paths, base):
        for line, obj in _jsonl(path, report):
            f = _text_fields(obj, {"doc_id": "id", "title": "title", "text": "clean_text"}, path, line, report,
                             optional=("title",))
            if f:
                yield Document(source_type="guideline", language=language, evidence_level=GUIDELINE_LEVEL,
                               meta={"publisher": obj.get("source"), "source": f"{path.name}:{line}"}, **f)


def _json_file(path: Path, report: SkipReport):
    """A whole JSON file's value, or None after reporting where it is invalid."""
    try:
        return json.loads("\n".join(t for _, t in _lines(path, report)))
    except json.JSONDecodeError as exc:
        report.problem(path, exc.lineno, None, "invalid JSON", exc.msg)
        return None


def pubmedqa_contexts(paths: str, base: Path, report: SkipReport) -> Iterator[Document]:
    """PubMedQA abstracts as ``paper`` documents keyed by PMID (contexts + conclusion)."""
    for path in source_files(paths, base):
        data = _json_file(path, report)
        if data is None:
            continue
        for pmid, obj in data.items():
            contexts = obj.get("CONTEXTS")
            if not contexts:
                report.problem(path, 1, f"{pmid}.CONTEXTS", "empty document")
                continue
            body = "\n".join([*contexts, obj.get("LONG_ANSWER", "")]).strip()
            yield Document(doc_id=f"pmid:{pmid}", title=f"PMID {pmid}", text=body, source_type="paper",
                           language="en", meta={"pmid": str(pmid), "year": obj.get("YEAR")})


def generic_jsonl(paths: str, base: Path, report: SkipReport, source_type: str | None = None,
                  language: str = "en") -> Iterator[Document]:
    """Our own schema: ``doc_id, text`` required; ``title, source_type, language, evidence_level, meta``."""
    for path in source_files(paths, base):
        for line, obj in _jsonl(path, report):
            f = _text_fields(obj, {"doc_id": "doc_id", "title": "title", "text": "text"}, path, line, report,
                             optional=("title",))
            if not f:
                continue
            kind = obj.get("source_type", source_type)
            if kind is None:
                report.problem(path, line, "source_type", "missing field")
                continue
            try:
                yield Document(source_type=kind, language=obj.get("language", language),
                               evidence_level=evidence_level_of(obj.get("evidence_level")),
                               meta={**(obj.get("meta") or {}), "source": f"{path.name}:{line}"}, **f)
            except ValueError as exc:
                report.problem(path, line, "source_type", "invalid field", str(exc))


TABLE_FIELDS = ("doc_id", "text", "title", "source_type", "evidence_level", "language")


def evidence_level_of(value) -> int | None:
    """An evidence level 1-9 from a table cell: a whole number or its exact text ("3", " 3 "); empty: none. Anything
    else (3.9, "3.0", true, "high") is a ValueError, never truncated or coerced to a level."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.strip() in tuple("123456789"):
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 9:
        return value
    raise ValueError(f"evidence level {value!r} is not a whole number 1-9")


def _table_rows(path: Path, fmt: str, report: SkipReport) -> Iterator[tuple[int, dict]]:
    """``(line, row)`` of a CSV (header row; the line a row starts on), JSONL, or JSON list file (``.gz`` allowed)."""
    if fmt == "jsonl":
        yield from _jsonl(path, report)
        return
    if fmt == "json":
        data = _json_file(path, report)
        if data is None:
            return
        if not isinstance(data, list):
            raise DataError(f"{path}: expected a JSON list of objects, found {type(data).__name__}")
        for i, obj in enumerate(data, 1):
            if isinstance(obj, dict):
                yield i, obj
            else:
                report.problem(path, i, None, "invalid JSON", "expected an object")
        return
    from ..data.readers import csv_rows

    for start, row, _ in csv_rows(path):
        yield start, row


def table(paths: str, base: Path, report: SkipReport, fields: dict, format: str | None = None,
          source_type: str | None = None, evidence_level: int | None = None,
          language: str = "en") -> Iterator[Document]:
    """A user's own documents as a table (CSV with a header, JSONL, or a JSON list; ``.gz`` allowed), with the
    columns named by ``fields``: ``doc_id`` and ``text`` required; ``title``, ``source_type``, ``evidence_level``
    (1-9), ``language`` optional. ``source_type`` / ``evidence_level`` options give a fixed value where no column
    does (guidelines are always level 3). ``format`` defaults to the file suffix."""
    unknown = sorted(set(fields) - set(TABLE_FIELDS))
    if unknown or not {"doc_id", "text"} <= set(fields):
        raise DataError(f"table reader: fields must map doc_id and text (optionally {', '.join(TABLE_FIELDS[2:])}); "
                        f"found {sorted(fields)}")
    if "source_type" not in fields and source_type is None:
        raise DataError("table reader: give a source_type column in fields or a fixed source_type option "
                        "(paper, entry, book, guideline)")
    for path in source_files(paths, base):
        suffixes = path.suffixes[:-1] if path.suffix == ".gz" else path.suffixes
        fmt = format or (suffixes[-1].lstrip(".") if suffixes else None)
        if fmt not in ("csv", "jsonl", "json"):
            raise DataError(f"{path}: table format csv, jsonl or json (from the suffix or the format option)")
        header_checked = False
        for line, obj in _table_rows(path, fmt, report):
            if fmt == "csv" and not header_checked:
                missing = [c for c in fields.values() if c not in obj]
                if missing:
                    raise DataError(f"{path}:1: column {missing[0]!r} (named in fields) is not in the header")
                header_checked = True
            names = {k: fields[k] for k in ("doc_id", "title", "text") if k in fields}
            f = _text_fields(obj, names, path, line, report, optional=("title",))
            if not f:
                continue
            level = obj.get(fields["evidence_level"]) if "evidence_level" in fields else evidence_level
            try:
                level = evidence_level_of(level)
                yield Document(doc_id=f["doc_id"], title=f.get("title", ""), text=f["text"],
                               source_type=obj.get(fields["source_type"]) if "source_type" in fields else source_type,
                               language=obj.get(fields["language"], language) if "language" in fields else language,
                               evidence_level=level, meta={"source": f"{path.name}:{line}"})
            except ValueError as exc:
                report.problem(path, line, fields.get("evidence_level") or fields.get("source_type"), "invalid field",
                               str(exc))


def bioasq_gold(paths: str, base: Path, report: SkipReport, language: str = "en") -> Iterator[Document]:
    """The BioASQ gold-evidence collection: one ``paper`` document per gold PubMed id (its doc_id), the id's gold
    snippets deduplicated in file order, from the golden files ``paths`` names (in MIRAGE's order: 11 to 7)."""
    from ..data import bioasq

    found = source_files(paths, base)
    order = {p: i for i, p in enumerate(bioasq.files(base))} if (base / "bioasq").is_dir() else {}
    for pmid, text in bioasq.gold_documents(base, sorted(found, key=lambda p: order.get(p, len(order)))):
        yield Document(doc_id=pmid, title="", text=text, source_type="paper", language=language,
                       meta={"pmid": pmid, "source": "bioasq golden snippets"})


# The source type of every document a reader yields, where the reader fixes it (the others take a ``source_type``
# option, with the default their signature gives; rows of generic_jsonl and table may carry their own).
READER_SOURCE_TYPES = {"medqa_textbooks": "book", "meditron_guidelines": "guideline", "pubmedqa_contexts": "paper",
                       "bioasq_gold": "paper"}


def declared_source_type(reader: str, options: dict) -> str:
    """What a recipe source's documents are, as a report states it ("per row" when the rows say)."""
    import inspect

    if reader in READER_SOURCE_TYPES:
        return READER_SOURCE_TYPES[reader]
    default = inspect.signature(READERS[reader]).parameters["source_type"].default
    return options.get("source_type") or default or "per row"


READERS = {
    "medqa_textbooks": medqa_textbooks,
    "medrag_jsonl": medrag_jsonl,
    "meditron_guidelines": meditron_guidelines,
    "pubmedqa_contexts": pubmedqa_contexts,
    "generic_jsonl": generic_jsonl,
    "table": table,
    "bioasq_gold": bioasq_gold,
}
