"""Read-only billing on each cloud (AWS Cost Explorer, Alibaba BSS OpenAPI, Tencent billing) and the ``cost`` tool."""

from tools.cost.cost_tool import COST_REPORT_KIND, build_cost_tools, cost_sources
from tools.cost.records import CostLine, CostReport, CostSource, Period, parse_period

__all__ = [
    "COST_REPORT_KIND",
    "CostLine",
    "CostReport",
    "CostSource",
    "Period",
    "build_cost_tools",
    "cost_sources",
    "parse_period",
]
