"""The rows of the reports: audit, model usage and feedback, built from the Store's records.

``botgateway audit``, ``usage`` and ``feedback`` print them; the web console
shows the same rows in its tables and CSV downloads. Both read the records and
call these functions, so a row means the same wherever it is read.
"""

from botgateway.report_rows.audit import AUDIT_COLUMNS, audit_rows
from botgateway.report_rows.feedback import FEEDBACK_COLUMNS, feedback_rows, flat_row, source_label
from botgateway.report_rows.since import parse_since
from botgateway.report_rows.usage import USAGE_COLUMNS, USAGE_GROUPS, usage_totals

__all__ = [
    "AUDIT_COLUMNS", "FEEDBACK_COLUMNS", "USAGE_COLUMNS", "USAGE_GROUPS", "audit_rows", "feedback_rows", "flat_row",
    "parse_since", "source_label", "usage_totals",
]
