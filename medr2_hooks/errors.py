"""Exceptions that say what was expected, what was found, and where."""

from __future__ import annotations


class Medr2Error(Exception):
    """Base class of every error this package raises on purpose."""


class DataError(Medr2Error):
    """A data file is missing or a row in it is malformed."""


class UnknownNameError(Medr2Error, KeyError):
    """A name (benchmark, task, model, ...) is not registered."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        super().__init__(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(self.valid)}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


class RowError(DataError):
    """A malformed row: names the file, the 1-based line (or row) and the field."""

    def __init__(self, path: object, line: int, field: str | None, problem: str):
        self.path, self.line, self.field = path, line, field
        where = f"{path}:{line}"
        what = f" field {field!r}" if field else ""
        super().__init__(f"{where}:{what} {problem}")
