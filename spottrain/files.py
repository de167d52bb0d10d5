"""One door for every file a command reads.

Each user file (plan, profile, measurement table, loss curves, trace, catalog) passes through
this module before its own schema looks at it, so every way a file can be wrong becomes one
:class:`~spottrain.errors.InputError` naming the file, line and column:

* the operating system: missing, a directory, a FIFO or device (reading would block), no
  permission, larger than :data:`MAX_FILE_BYTES`;
* the encoding: UTF-8, with a leading byte-order mark accepted and dropped (spreadsheets write
  one); a NUL byte or a byte sequence that is not UTF-8 is refused with its byte offset and line;
* the syntax: JSON (line and column of the error; ``NaN``/``Infinity`` refused: they are not
  JSON) and CSV (CRLF and quoted fields accepted; a header with an empty, duplicated or missing
  column, a row with more fields than the header);
* the values: :meth:`CsvTable.numbers` parses a whole column at once (pandas, no Python loop per
  row) and names the first cell that is not a finite number in the column's range;
  :func:`validate_model` turns a pydantic schema's first error into the same one-line message.

The module sits at the bottom of the layers (errors and the standard library, numpy, pandas and
pydantic only), so every reader can use it.

>>> from spottrain.files import read_csv  # doctest: +SKIP
>>> table = read_csv("m.csv", required=("model", "batch_size"))  # doctest: +SKIP
>>> table.numbers("batch_size", integer=True)  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spottrain.errors import InputError, suggest

MAX_FILE_BYTES = 1 << 30
"""The largest input file read (1 GiB): a measurement table, trace or catalog ten times larger
than any real one; a bigger file is a wrong path (a dataset, an image) and would exhaust memory."""

BOM = b"\xef\xbb\xbf"


def _name(path: str | os.PathLike[str]) -> str:
    return os.fspath(path)


def read_bytes(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file; OS errors become one-line :class:`InputError`\\ s.

    A directory, FIFO, socket or device is refused before opening it (``/dev/zero`` or a FIFO would
    block or never end); so is a file larger than ``max_bytes``.
    """
    name = _name(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"file not found (no such {what})", file=name) from None
    except NotADirectoryError:
        raise InputError(f"no such {what} (a part of the path is not a directory)", file=name) from None
    except PermissionError:
        raise InputError(f"cannot read {what}: permission denied", file=name) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", file=name) from None
    except ValueError:  # embedded NUL in the path
        raise InputError(f"not a usable {what} path", file=repr(name)) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"is a directory; expected a {what}", file=name)
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"not a regular file (a FIFO, socket or device); expected a {what}", file=name)
    if st.st_size > max_bytes:
        raise InputError(f"{st.st_size / 2**20:,.0f} MiB is larger than any {what} spottrain reads "
                         f"({max_bytes / 2**20:,.0f} MiB); is this the right file?", file=name)
    try:
        with open(path, "rb") as fh:
            return fh.read(max_bytes + 1)
    except PermissionError:
        raise InputError(f"cannot read {what}: permission denied", file=name) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", file=name) from None


def decode(data: bytes, *, file: str) -> str:
    """UTF-8 text of ``data``: a leading byte-order mark dropped, NUL bytes and other encodings refused."""
    if data.startswith(BOM):
        data = data[len(BOM):]
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputError(f"binary data (a NUL byte at byte offset {nul}); expected UTF-8 text",
                         file=file, line=data.count(b"\n", 0, nul) + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start:exc.start + 1].hex()
        raise InputError(f"not UTF-8 text (byte 0x{bad} at byte offset {exc.start}); save the file as UTF-8",
                         file=file, line=data.count(b"\n", 0, exc.start) + 1) from None


def read_text(path: str | os.PathLike[str], *, what: str = "file") -> str:
    """The UTF-8 text of a file (see :func:`read_bytes` and :func:`decode`)."""
    return decode(read_bytes(path, what=what), file=_name(path))


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def loads_json(text: str, *, file: str) -> Any:
    """Parse JSON text; errors name the line and column. ``NaN`` and ``Infinity`` are refused."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", file=file, line=exc.lineno, column=str(exc.colno)) from None
    except ValueError as exc:  # parse_constant
        raise InputError(f"{exc} is not a JSON number; write a finite number or null", file=file) from None
    except RecursionError:
        raise InputError("JSON nested too deeply", file=file) from None


def read_json(path: str | os.PathLike[str], *, what: str = "JSON file") -> Any:
    """The parsed JSON document of a file."""
    name = _name(path)
    return loads_json(read_text(path, what=what), file=name)


# --- CSV ------------------------------------------------------------------------------------------


@dataclass
class CsvTable:
    """A CSV file's header and non-blank, non-comment rows, each with its line number."""

    file: str
    header: list[str]
    header_line: int
    rows: list[list[str]]
    """Cells as written (not stripped); every row padded to the header's width."""
    lines: list[int]
    """Line of each row in the file (1-based)."""
    comments: list[tuple[int, str]]
    """Comment lines (``#`` ...) before and between rows, with their line numbers."""
    _columns: list[tuple[str, ...]] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def has(self, column: str) -> bool:
        return column in self._index

    @property
    def _index(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.header)}

    def texts(self, column: str) -> list[str]:
        """The stripped cells of ``column`` ("" for every row when the column is absent)."""
        i = self._index.get(column)
        if i is None:
            return [""] * len(self.rows)
        if self._columns is None:
            self._columns = list(zip(*self.rows)) if self.rows else [() for _ in self.header]
        return list(map(str.strip, self._columns[i]))

    def dicts(self) -> list[tuple[int, dict[str, str]]]:
        """``(line, {column: cell})`` per row, the form :func:`csv.DictReader` gives."""
        return [(line, dict(zip(self.header, row))) for line, row in zip(self.lines, self.rows)]

    def error(self, message: str, *, row: int | None = None, column: str | None = None) -> InputError:
        """An :class:`InputError` at a row index (or the header when ``row`` is None)."""
        return InputError(message, file=self.file, line=self.header_line if row is None else self.lines[row],
                          column=column)

    def numbers(self, column: str, *, integer: bool = False, low: float | None = 0.0, low_open: bool = True,
                high: float | None = None, required: bool = True, default: float = math.nan,
                texts: Sequence[str] | None = None) -> np.ndarray:
        """The column parsed at once as float64; empty cells are ``default`` (or refused if ``required``).

        Every non-empty cell must be a finite number, > ``low`` (>= with ``low_open=False``; no
        bound when None), <= ``high``, and whole with ``integer``. The first bad cell raises an
        :class:`InputError` naming its line and column and what was expected.
        """
        import pandas as pd

        cells = list(texts) if texts is not None else self.texts(column)
        series = pd.Series(cells, dtype=object)
        empty = series.eq("").to_numpy()
        values = np.array(pd.to_numeric(series.where(~empty, None), errors="coerce"), dtype=float)
        lowercase = series.str.lower()
        # pandas reads 'nan', 'inf', '1e999' as numbers: they are not finite measurements.
        bad_text = ~empty & ~np.isfinite(values)
        named_const = lowercase.isin(("nan", "inf", "-inf", "+inf", "infinity", "-infinity")).to_numpy()
        bad_text |= named_const
        if required and empty.any():
            i = int(np.argmax(empty))
            raise self.error(f"expected {_want(integer, low, low_open, high)}, got an empty value", row=i,
                             column=column)
        out_of_range = np.zeros(len(values), dtype=bool)
        with np.errstate(invalid="ignore"):
            if low is not None:
                out_of_range |= (values <= low) if low_open else (values < low)
            if high is not None:
                out_of_range |= values > high
            if integer:
                out_of_range |= np.isfinite(values) & (np.floor(values) != values)
        bad = bad_text | (~empty & out_of_range)
        if bad.any():
            i = int(np.argmax(bad))
            raise self.error(f"expected {_want(integer, low, low_open, high)}, got {cells[i]!r}", row=i, column=column)
        values[empty] = default
        return values


def _want(integer: bool, low: float | None, low_open: bool, high: float | None) -> str:
    kind = "a whole number" if integer else "a number"
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    return kind + (" " + " and ".join(parts) if parts else " (finite)")


def parse_csv(text: str, *, file: str, required: Iterable[str] = (), known: Iterable[str] | None = None,
              comments: bool = True, what: str = "table", pad: bool = True) -> CsvTable:
    """Parse CSV text (already decoded) into a :class:`CsvTable`.

    ``required`` columns must be in the header; with ``known``, any other column is refused (near
    miss suggested). Lines whose first non-blank character is ``#`` are comments when
    ``comments``. A row with more fields than the header is refused; one with fewer is padded
    with empty cells when ``pad`` (else refused).
    """
    header: list[str] | None = None
    header_line = 0
    rows: list[list[str]] = []
    lines: list[int] = []
    notes: list[tuple[int, str]] = []
    records, starts = _records(text, file=file)
    for cells, line in zip(records, starts):
        first = cells[0].lstrip() if cells else ""
        if not first and not any(c.strip() for c in cells):
            continue
        if comments and first.startswith("#"):
            notes.append((line, ",".join(cells)))
            continue
        if header is None:
            header = [c.strip() for c in cells]
            header_line = line
            continue
        rows.append(cells)
        lines.append(line)
    if header is not None:
        width = len(header)
        for k, cells in enumerate(rows):
            if len(cells) == width:
                continue
            if len(cells) > width:
                if any(c.strip() for c in cells[width:]):
                    raise InputError(f"{len(cells)} fields but the header has {width}", file=file, line=lines[k])
                rows[k] = cells[:width]
            else:
                if not pad:
                    raise InputError(f"{len(cells)} fields but the header has {width}", file=file, line=lines[k])
                rows[k] = cells + [""] * (width - len(cells))
    if header is None:
        raise InputError(f"empty {what}: no header line", file=file, line=1)
    for i, col in enumerate(header):
        if not col:
            raise InputError(f"column {i + 1} of the header has no name", file=file, line=header_line)
    seen: dict[str, int] = {}
    for i, col in enumerate(header):
        if col in seen:
            raise InputError(f"column {col!r} appears twice in the header (fields {seen[col] + 1} and {i + 1}); "
                             "keep one", file=file, line=header_line, column=col)
        seen[col] = i
    if known is not None:
        known = list(known)
        for col in header:
            if col not in known:
                near = suggest(col, known)
                hint = f"did you mean {near!r}?" if near else f"expected columns {', '.join(known)}"
                raise InputError(f"unknown column {col!r}; {hint}", file=file, line=header_line, column=col)
    missing = [c for c in required if c not in seen]
    if missing:
        near = [suggest(c, header) for c in missing]
        hint = "".join(f" ({h!r} is close to {c!r})" for c, h in zip(missing, near) if h)
        raise InputError(f"missing required column(s) {', '.join(missing)}{hint}", file=file, line=header_line,
                         column=missing[0])
    return CsvTable(file=file, header=header, header_line=header_line, rows=rows, lines=lines, comments=notes)


def _records(text: str, *, file: str) -> tuple[list[list[str]], Sequence[int]]:
    """All CSV records of ``text`` with the line each starts on.

    The common case (no quoted line breaks: as many records as lines) is read in one call to the
    C parser; otherwise records are read one by one to follow their lines.
    """
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        records = list(reader)
        if len(records) == reader.line_num:
            return records, range(1, len(records) + 1)
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        records, starts, start = [], [], 1
        for cells in reader:
            records.append(cells)
            starts.append(start)
            start = reader.line_num + 1
        return records, starts
    except csv.Error as exc:
        raise InputError(f"not valid CSV: {exc}", file=file, line=reader.line_num or 1) from None


def read_csv(path: str | os.PathLike[str], *, what: str = "table", **kwargs: Any) -> CsvTable:
    """Read and parse a CSV file (see :func:`read_text` and :func:`parse_csv`)."""
    name = _name(path)
    return parse_csv(read_text(path, what=what), file=name, what=what, **kwargs)


# --- pydantic schemas -----------------------------------------------------------------------------


def validate_model(model: type, data: Any, *, file: str, what: str) -> Any:
    """``model.model_validate(data)`` with the first error as a one-line :class:`InputError`:
    ``plan.json, column groups[0].price_usd_per_hour: expected a number >= 0, got -3``."""
    # lazy: pydantic only for model validation (this module also serves plain CSV and JSON reads)
    from pydantic import ValidationError

    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object ({what}), got a JSON {_json_kind(data)}", file=file)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = _loc(err.get("loc", ()))
        got = err.get("input")
        msg = _pydantic_message(err)
        shown = "" if err.get("type") == "missing" else f", got {_short(got)}"
        raise InputError(f"{what}: {msg}{shown}", file=file, column=where or None) from None


def _json_kind(data: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(type(data), type(data).__name__)


def _loc(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _pydantic_message(err: dict) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return "missing required key"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        bound = next(iter(ctx.values()), "?")
        return f"expected a number {op} {bound}"
    if kind == "finite_number":
        return "expected a finite number"
    if kind.startswith("int"):
        return "expected a whole number"
    if kind.startswith("float"):
        return "expected a number"
    if kind.startswith("bool"):
        return "expected true or false"
    if kind.startswith("string"):
        return "expected a string"
    return str(err.get("msg", "invalid value")).removeprefix("Value error, ")


# --- output paths ---------------------------------------------------------------------------------


def check_output(path: str | os.PathLike[str], *, option: str, force: bool = False,
                 suffixes: Sequence[str] | None = None) -> Path:
    """Refuse, before any expensive work, an output path that cannot be written.

    A directory, an existing file without ``force``, a parent that does not exist or is not
    writable, or a wrong suffix. Nothing is created.
    """
    p = Path(path)
    name = str(p)
    if not name or name.endswith(os.sep) or p.is_dir():
        raise InputError("is a directory; give a file name", file=name, column=option)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise InputError(f"expected a file name ending in {' or '.join(suffixes)}, got {p.name!r}", column=option)
    if p.exists() or p.is_symlink():
        if not force:
            raise InputError("file exists; pass --force to overwrite it", file=name, column=option)
        if not os.access(p, os.W_OK):
            raise InputError("cannot overwrite: permission denied", file=name, column=option)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise InputError(f"directory {str(parent)!r} does not exist; create it first", file=name, column=option)
    if not parent.is_dir():
        raise InputError(f"{str(parent)!r} is not a directory", file=name, column=option)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write in directory {str(parent)!r}: permission denied", file=name, column=option)
    return p


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` to a temporary file beside ``path`` (same directory, same file system) and
    rename it over ``path``; a failure leaves neither a partial file nor a stray temporary one."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except IsADirectoryError:
        _unlink(tmp)
        raise InputError("is a directory; give a file name", file=str(p)) from None
    except OSError as exc:
        _unlink(tmp)
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOSPC, errno.ENOTDIR):
            raise InputError(f"cannot write: {exc.strerror}", file=str(p)) from None
        raise
    return p


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
