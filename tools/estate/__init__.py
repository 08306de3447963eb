"""The estate: every resource kind the model can look up, how they connect, and who changed them.

Providers map their SDK shapes into :class:`Resource` (:mod:`.resource`) and
answer the :class:`EstateSource` contract (:mod:`.source`); cloud sources share
their SDK plumbing (:mod:`.sdk_source`).
"""

from tools.estate.resource import KINDS, Change, Kind, Link, Listener, Resource, Rule, kind_label
from tools.estate.source import MAX_PER_LISTING, ChangeQuery, EstateSource, Listing, Prerequisite, SourceError, Target

__all__ = [
    "KINDS",
    "MAX_PER_LISTING",
    "Change",
    "ChangeQuery",
    "EstateSource",
    "Kind",
    "Link",
    "Listener",
    "Listing",
    "Prerequisite",
    "Resource",
    "Rule",
    "SourceError",
    "Target",
    "kind_label",
]
