"""The reports as CSV, for ``botgateway audit|usage|feedback --format csv`` and the console's downloads alike.

A header line of the columns, then a line per row: a list is joined with
``; ``, ``None`` is empty. A cell that a spreadsheet would run as a formula
(it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, as a
question, a tool argument or a 👎's reason may) is prefixed with ``'`` so that
it opens as the text it is (CSV injection). Numbers are written as numbers.
Lines end in CRLF (RFC 4180), so that a cell holding a carriage return is quoted
like one holding a newline, and a reader keeps it in its row.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

__all__ = ["FORMULA_STARTS", "cell_text", "csv_cell", "write_csv"]

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What a cell starting with would be read as a formula by a spreadsheet."""


def cell_text(value: Any) -> Any:
    """``value`` as one cell: a list joined with ``; ``, ``None`` empty, anything else as it is."""
    if isinstance(value, list | tuple):
        return "; ".join(str(item) for item in value)
    return "" if value is None else value


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell (:func:`cell_text`), text a spreadsheet would run as a formula prefixed with ``'``."""
    cell = cell_text(value)
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS):
        return "'" + cell
    return cell


def write_csv(out: TextIO, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Write a header of ``columns`` and each of ``rows`` (its other keys left out) as CSV cells to ``out``."""
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([csv_cell(column) for column in columns])
    writer.writerows([csv_cell(row.get(column)) for column in columns] for row in rows)
