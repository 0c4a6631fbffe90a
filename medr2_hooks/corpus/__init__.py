"""The evidence corpus: document records, source readers, segmentation, and the on-disk corpus store."""

from .document import SOURCE_TYPES, Document, SkipReport

__all__ = ["Document", "SOURCE_TYPES", "SkipReport"]
