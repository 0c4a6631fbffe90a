"""RareArena RDS / RDC: free-text rare-disease diagnosis from a case report (Orphanet-coded gold).

Files are JSON lines ``{case_report, diagnosis, Orpha_name, Orpha_id}`` (RDC adds ``test_results``), read line by
line (the hub viewer fails on their mixed types): the hub's ``THUMedInfo/RareArena`` ``RDS.json`` / ``RDC.json``,
``<MEDR2_DATA_DIR>/rarearena/{RDS,RDC}.json`` when present, or any file in that schema (``cases_file``).
A record has no options; its answer is the Orphanet name, and the case's own diagnosis wording and Orpha id
travel in ``meta`` for the scorer only.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError, RowError
from .readers import field, iter_jsonl, require_file
from .record import Record

HUB = "THUMedInfo/RareArena"
FILES = {"rds": "RDS.json", "rdc": "RDC.json"}


def records(path, variant: str) -> list[Record]:
    out = []
    for line, obj in iter_jsonl(Path(path)):
        case = field(obj, "case_report", path, line)
        if variant == "rdc":
            tests = obj.get("test_results")
            if not isinstance(tests, str) or not tests.strip():
                raise RowError(path, line, "test_results", "RDC case without test results")
            case = f"{case}\n\nTest results: {tests.strip()}"
        name = field(obj, "Orpha_name", path, line)
        out.append(Record(
            id=f"{variant}-{line:05d}", question=case, options={}, answer=name, language="en",
            meta={"orpha_id": str(field(obj, "Orpha_id", path, line, (str, int))), "orpha_name": name,
                  "diagnosis": str(obj.get("diagnosis") or ""), "source": f"{Path(str(path)).name}:{line}"}))
    return out


def _local(root: Path, variant: str) -> list[Record]:
    path = root / "rarearena" / FILES[variant]
    if not path.is_file():
        raise DataError(f"{path} not found: the RareArena case files are not in the mirror; use source=hub with "
                        f"network, or --metadata '{{\"cases_file\": {{\"rarearena_{variant}\": "
                        f"\"<{FILES[variant]}>\"}}}}'")
    return records(path, variant)


def _hub(variant: str) -> list[Record]:
    from huggingface_hub import hf_hub_download

    return records(hf_hub_download(HUB, FILES[variant], repo_type="dataset"), variant)


def load_rds(root: Path) -> list[Record]:
    return _local(root, "rds")


def load_rdc(root: Path) -> list[Record]:
    return _local(root, "rdc")


def load_rds_hub() -> list[Record]:
    return _hub("rds")


def load_rdc_hub() -> list[Record]:
    return _hub("rdc")


def load_rds_file(path) -> list[Record]:
    return records(require_file(Path(path)), "rds")


def load_rdc_file(path) -> list[Record]:
    return records(require_file(Path(path)), "rdc")
