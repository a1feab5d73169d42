"""The sweep's embedded store (SQLite) and its CSV/JSON exports.

Rules:

1. One row per cell key (:func:`fusionviz.sweep.spec.cell_key`) in ``cells`` (the check) and,
   when timed, one in ``timings``. Each row is committed as soon as its cell finishes, so a
   sweep that is killed loses at most the cells that were running.
2. The exports are written from the store at the end: one row per cell of *this* sweep, in
   model-major order, under the model names of this sweep (two models with the same bytes
   share one stored check).
3. :func:`read_results` reads an export back (CSV or JSON) into the same typed rows, for the
   Zoo page.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fusionviz import errors
from fusionviz.sweep.spec import Cell, SweepError

logger = logging.getLogger(__name__)

#: Columns of the CSV/JSON exports, in order.
COLUMNS = (
    "model", "variant", "backend", "status", "valid", "verified", "new_nan", "nodes_before",
    "nodes_after", "optimize_s", "latency_ratio", "latency_lo", "latency_hi", "peak_mb", "error",
    "model_sha256", "passes", "model_path", "detail", "timing_note",
)
_BOOL = ("valid", "verified", "new_nan")
_INT = ("nodes_before", "nodes_after")
_FLOAT = ("optimize_s", "latency_ratio", "latency_lo", "latency_hi", "peak_mb")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cells (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    model_path TEXT,
    model_sha256 TEXT,
    variant TEXT NOT NULL,
    passes TEXT NOT NULL,
    backend TEXT NOT NULL,
    versions TEXT,
    status TEXT NOT NULL,
    valid INTEGER,
    verified INTEGER,
    new_nan INTEGER,
    nodes_before INTEGER,
    nodes_after INTEGER,
    optimize_s REAL,
    changes INTEGER,
    declined TEXT,
    max_abs_diff REAL,
    max_rel_diff REAL,
    error TEXT,
    detail TEXT,
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS timings (
    key TEXT PRIMARY KEY,
    min_time_s REAL,
    latency_ratio REAL,
    latency_lo REAL,
    latency_hi REAL,
    peak_mb REAL,
    variant_ms REAL,
    original_ms REAL,
    error TEXT,
    note TEXT,
    finished_at REAL
);
"""
_CELL_FIELDS = ("key", "model", "model_path", "model_sha256", "variant", "passes", "backend", "versions",
                "status", "valid", "verified", "new_nan", "nodes_before", "nodes_after", "optimize_s",
                "changes", "declined", "max_abs_diff", "max_rel_diff", "error", "detail", "finished_at")
_TIMING_FIELDS = ("key", "min_time_s", "latency_ratio", "latency_lo", "latency_hi", "peak_mb",
                  "variant_ms", "original_ms", "error", "note", "finished_at")


def _to_db(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return value


class SweepStore:
    """Cells and timings of sweeps in one SQLite file (rule 1).

    Args:
        path: the database file (created with its folder when missing).

    Raises:
        SweepError: the file cannot be opened or is not a database.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise SweepError(f"Cannot open the sweep store '{errors.printable(path, 200)}': {exc}.") from None
        self._db.row_factory = sqlite3.Row

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def __enter__(self) -> SweepStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def put_cell(self, row: Mapping[str, Any]) -> None:
        """Insert or replace one check row (``row`` has the ``cells`` columns) and commit."""
        self._put("cells", _CELL_FIELDS, row)

    def put_timing(self, row: Mapping[str, Any]) -> None:
        """Insert or replace one timing row (``timings`` columns) and commit."""
        self._put("timings", _TIMING_FIELDS, row)

    def _put(self, table: str, fields: Sequence[str], row: Mapping[str, Any]) -> None:
        values = {f: _to_db(row.get(f)) for f in fields}
        values["finished_at"] = values["finished_at"] or time.time()
        self._db.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(fields)}) "
                         f"VALUES ({', '.join('?' * len(fields))})", [values[f] for f in fields])
        self._db.commit()

    # ------------------------------------------------------------------ reading

    def done_keys(self, keys: Iterable[str]) -> set[str]:
        """The keys among ``keys`` that have a check row."""
        return self._present("cells", keys)

    def timed_keys(self, keys: Iterable[str]) -> set[str]:
        """The keys among ``keys`` that have a timing row."""
        return self._present("timings", keys)

    def _present(self, table: str, keys: Iterable[str]) -> set[str]:
        keys = list(dict.fromkeys(keys))
        out: set[str] = set()
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            rows = self._db.execute(f"SELECT key FROM {table} WHERE key IN ({', '.join('?' * len(chunk))})",
                                    chunk)
            out.update(r[0] for r in rows)
        return out

    def cell(self, key: str) -> dict | None:
        """The stored check row of ``key``, or None."""
        r = self._db.execute("SELECT * FROM cells WHERE key = ?", (key,)).fetchone()
        return dict(r) if r else None

    def timing(self, key: str) -> dict | None:
        """The stored timing row of ``key``, or None."""
        r = self._db.execute("SELECT * FROM timings WHERE key = ?", (key,)).fetchone()
        return dict(r) if r else None

    def count(self) -> int:
        """Check rows in the store."""
        return int(self._db.execute("SELECT COUNT(*) FROM cells").fetchone()[0])

    def rows(self, cells: Sequence[Cell]) -> list[dict]:
        """Export rows for ``cells`` (rule 2); cells with no stored check are left out."""
        out = []
        for c in cells:
            stored = self.cell(c.key)
            if stored is None:
                continue
            t = self.timing(c.key) or {}
            row = {
                "model": c.model.name,
                "variant": c.variant.label,
                "backend": c.backend,
                "status": stored["status"],
                "valid": _from_db_bool(stored["valid"]),
                "verified": _from_db_bool(stored["verified"]),
                "new_nan": _from_db_bool(stored["new_nan"]),
                "nodes_before": stored["nodes_before"],
                "nodes_after": stored["nodes_after"],
                "optimize_s": stored["optimize_s"],
                "latency_ratio": t.get("latency_ratio"),
                "latency_lo": t.get("latency_lo"),
                "latency_hi": t.get("latency_hi"),
                "peak_mb": t.get("peak_mb"),
                "error": stored["error"] or t.get("error") or "",
                "model_sha256": c.model.sha256,
                "passes": "+".join(c.variant.passes),
                "model_path": c.model.path,
                "detail": stored["detail"] or "",
                "timing_note": t.get("note") or "",
            }
            out.append(row)
        return out


def _from_db_bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


# --------------------------------------------------------------------------- exports


def totals(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Rows per status (every status of :data:`fusionviz.audit.STATUSES`, zeros included)."""
    from fusionviz.audit import STATUSES

    out = dict.fromkeys(STATUSES, 0)
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_results(rows: Sequence[Mapping[str, Any]], path: str | Path, *,
                  meta: Mapping[str, Any] | None = None) -> Path:
    """Write ``rows`` as CSV or JSON (by the file's extension).

    Args:
        rows: export rows (:meth:`SweepStore.rows`).
        path: ``.csv`` or ``.json``.
        meta: extra fields for the JSON file (versions, timing settings).

    Returns:
        The path written.

    Raises:
        SweepError: another extension, or the file cannot be written.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".csv", ".json"):
        raise SweepError(f"--out must end in .csv or .json, not '{errors.printable(p.name, 100)}'.")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".csv":
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(COLUMNS)
            for r in rows:
                w.writerow([_csv_value(r.get(c)) for c in COLUMNS])
            p.write_text(buf.getvalue(), encoding="utf-8")
        else:
            doc = {"columns": list(COLUMNS), "totals": totals(rows), **dict(meta or {}),
                   "rows": [{c: r.get(c) for c in COLUMNS} for r in rows]}
            p.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    except OSError as exc:
        raise SweepError(f"Cannot write '{errors.printable(p, 200)}': {exc.strerror}.") from None
    return p


def _parse_bool(text: Any) -> bool | None:
    if isinstance(text, bool) or text is None:
        return text
    t = str(text).strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    return None


def _parse_number(text: Any, kind: type) -> float | int | None:
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    try:
        return kind(float(text)) if kind is int else float(text)
    except (TypeError, ValueError):
        return None


def normalize(row: Mapping[str, Any]) -> dict:
    """One results row with typed values (booleans, numbers, strings) and every column."""
    out: dict[str, Any] = {}
    for c in COLUMNS:
        v = row.get(c)
        if c in _BOOL:
            out[c] = _parse_bool(v)
        elif c in _INT:
            out[c] = _parse_number(v, int)
        elif c in _FLOAT:
            out[c] = _parse_number(v, float)
        else:
            out[c] = "" if v is None else str(v)
    out["backend"] = out["backend"] or "ort"
    return out


def read_results(data: bytes | str | Path, name: str = "") -> list[dict]:
    """Rows of a sweep results file (CSV or JSON), typed (rule 3).

    Args:
        data: the file's bytes, or its path.
        name: the file name (decides CSV or JSON for bytes; JSON when it starts with ``{``).

    Returns:
        One typed row per cell.

    Raises:
        SweepError: unreadable, not CSV/JSON, or without ``model``/``variant``/``status`` columns.
    """
    if isinstance(data, (str, Path)):
        name = name or str(data)
        try:
            data = Path(data).read_bytes()
        except OSError as exc:
            raise SweepError(f"Cannot read '{errors.printable(name, 200)}': {exc.strerror}.") from None
    text = data.decode("utf-8", "replace").lstrip("\ufeff")
    label = errors.printable(Path(name).name if name else "the file", 100)
    raw: list[Mapping[str, Any]]
    if name.lower().endswith(".json") or text.lstrip().startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise SweepError(f"{label} is not valid JSON: {exc}.") from None
        raw = doc.get("rows", []) if isinstance(doc, dict) else doc
        if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
            raise SweepError(f"{label} has no list of result rows.")
    else:
        raw = list(csv.DictReader(io.StringIO(text)))
    if not raw:
        raise SweepError(f"{label} holds no result rows.")
    missing = [c for c in ("model", "variant", "status") if c not in raw[0]]
    if missing:
        raise SweepError(f"{label} is not a sweep results file: it has no {', '.join(missing)} column.")
    return [normalize(r) for r in raw]
