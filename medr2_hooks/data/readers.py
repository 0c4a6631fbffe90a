"""File readers that report malformed rows as ``file:line: field ...`` instead of skipping them."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import DataError, RowError


CSV_FIELD_LIMIT = 64 * 1024 * 1024  # one field (a whole guideline in a cell); csv's default is 128 KB


def open_text(path: Path) -> io.TextIOBase:
    """A UTF-8 text file (``.gz`` allowed); a byte-order mark (Excel's "CSV UTF-8") is not part of the text."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def csv_rows(path: Path, header: bool = True) -> Iterator[tuple[int, dict | list, list[str]]]:
    """``(line a row starts on, row, header)`` of a CSV file (rows as dicts with a header, else lists). A file that
    is not UTF-8 is a DataError naming the file and line; a malformed row (an unterminated quote, a field over
    :data:`CSV_FIELD_LIMIT`) a RowError naming the line, never a traceback."""
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    start = 1
    reader = None
    try:
        with open_text(path) as fh:
            reader = csv.DictReader(fh) if header else csv.reader(fh)
            names = list(reader.fieldnames or []) if header else []
            start = reader.line_num + 1
            for row in reader:
                yield start, row, names
                start = reader.line_num + 1
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}:{start}: not UTF-8 text ({exc.reason} at byte {exc.start} of a read block); save the "
                        "file as UTF-8") from None
    except csv.Error as exc:
        raise RowError(path, start, None, f"malformed CSV ({exc})") from None


def require_file(path: Path, *, setting: str = "MEDR2_DATA_DIR", hub: str | None = None) -> Path:
    if not path.is_file():
        alt = f"; or load it from the Hugging Face hub with source='hub' ({hub})" if hub else ""
        raise DataError(
            f"missing data file {path}: expected it under the data mirror; set {setting} to the folder "
            f"laid out as shared/data/README.md describes{alt}"
        )
    return path


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` for each non-blank line; a bad line raises RowError."""
    try:
        with open_text(path) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line, parse_constant=_no_constant)
                except json.JSONDecodeError as exc:
                    raise RowError(path, lineno, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
                except RecursionError:
                    raise RowError(path, lineno, None, "invalid JSON (nested too deeply)") from None
                except ValueError as exc:  # a number over int()'s digit limit; NaN or Infinity (_no_constant)
                    raise RowError(path, lineno, None, f"invalid JSON ({exc})") from None
                if not isinstance(obj, dict):
                    raise RowError(path, lineno, None, f"expected a JSON object, found {type(obj).__name__}")
                yield lineno, obj
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: invalid UTF-8 ({exc.reason} at byte {exc.start})") from None


def read_json(path: Path) -> Any:
    try:
        with open_text(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise RowError(path, exc.lineno, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None


def iter_csv(path: Path, n_fields: int) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(row_number, fields)`` of a header-less CSV; a row with the wrong arity raises RowError."""
    for line, row, _ in csv_rows(path, header=False):
        if not row:
            continue
        if len(row) != n_fields:
            raise RowError(path, line, None, f"expected {n_fields} fields, found {len(row)}")
        yield line, row


def field(obj: dict, name: str, path: Path, line: int, kind: type | tuple[type, ...] = str) -> Any:
    """``obj[name]``, present, of ``kind`` and (for strings) not blank — or a RowError naming it."""
    if name not in obj or obj[name] is None:
        raise RowError(path, line, name, "is missing")
    value = obj[name]
    if not isinstance(value, kind):
        raise RowError(path, line, name, f"expected {getattr(kind, '__name__', kind)}, found {type(value).__name__}")
    if isinstance(value, str) and not value.strip():
        raise RowError(path, line, name, "is empty")
    return value


def check_answer(answer: Any, labels: list[str], path: Path, line: int, name: str) -> str:
    if answer not in labels:
        raise RowError(path, line, name, f"answer {answer!r} is not one of the options {labels}")
    return answer
