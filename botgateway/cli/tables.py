"""The output of the report commands (``audit``, ``usage``, ``feedback``): a table, JSON lines or CSV.

Each command builds its rows (one mapping a line, the same keys in every
format) and says how its table looks; :func:`write_rows` prints them in the
format asked for. Cells are plain text, never rich markup: a model name, a
principal or a question holding ``[brackets]`` is printed as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TextIO

from botgateway.report_rows.csv_rows import cell_text, write_csv

__all__ = ["FORMATS", "TablePrinter", "csv_cell", "print_table", "write_rows"]

FORMATS = ("table", "jsonl", "csv")
"""The output formats of every report command."""

TablePrinter = Callable[[TextIO], None]
"""Prints a command's rows as its table (:func:`print_table` with its title, columns and cells)."""

_PIPED_WIDTH = 200
"""Width of a table piped into a file or a pager: 80 columns would fold every id (a terminal keeps its own)."""


def csv_cell(value: Any) -> Any:
    """A value as a table's cell: a list joined with ``; ``, ``None`` empty, anything else as it is (the CSV
    itself is written by :func:`~botgateway.report_rows.csv_rows.write_csv`, formulas defused)."""
    return cell_text(value)


def write_rows(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], fmt: str, out: TextIO, *, table: TablePrinter
) -> None:
    """Print ``rows`` as ``jsonl`` (one object a line, lists kept), ``csv`` (a header of ``columns``, lists joined,
    formulas defused: the core's :func:`~botgateway.report_rows.csv_rows.write_csv`) or, for ``table``, through
    ``table``."""
    if fmt == "jsonl":
        out.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    elif fmt == "csv":
        write_csv(out, columns, rows)
    else:
        table(out)


def print_table(
    out: TextIO,
    title: str,
    columns: Sequence[str],
    cells: Iterable[Sequence[str]],
    *,
    footer: Sequence[str] | None = None,
    right: Collection[str] = (),
    notes: Sequence[str] = (),
) -> None:
    """Print one table: ``title``, a header of ``columns``, a line per row of ``cells`` (text, taken literally),
    ``footer`` under the columns when given, the columns in ``right`` right-aligned, then each of ``notes``."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title), show_footer=footer is not None)
    for index, column in enumerate(columns):
        table.add_column(column, footer=Text(footer[index]) if footer is not None else "",
                         justify="right" if column in right else "left", overflow="fold")
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))
    console = Console(file=out, soft_wrap=False, width=None if out.isatty() else _PIPED_WIDTH)
    console.print(table)
    for note in notes:
        console.print(Text(note))
