"""YAML read within bounds: no nesting past :data:`MAX_DEPTH`, no alias expanding past :data:`MAX_ALIAS_VALUES`.

``yaml.safe_load`` returns an alias bomb at once, as a graph of shared nodes,
but everything that walks the result afterwards (``${VAR}`` substitution,
validation) pays for every expanded leaf: nine levels of nine aliases are
387 million of them. Deep nesting likewise overflows Python's recursion in the
composer. The bounds are checked while the document is composed, so a hostile
file is refused after reading a few hundred events, long before anything
walks it. The events come from libyaml when PyYAML has it, else from PyYAML's
own parser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, SequenceNode
from yaml.resolver import Resolver

if TYPE_CHECKING:
    from yaml._yaml import Mark as _LibyamlMark

__all__ = ["MAX_ALIAS_VALUES", "MAX_DEPTH", "YamlLimitError", "load_yaml"]

MAX_DEPTH = 64
"""Deepest nesting of mappings and lists accepted; a real config needs fewer than ten."""

MAX_ALIAS_VALUES = 10_000
"""Most values the aliases of one file may stand for, once expanded; real configs share a few small blocks."""

_NESTING = f"nested deeper than {MAX_DEPTH} levels; a config needs a handful"


class YamlLimitError(yaml.MarkedYAMLError):
    """The document is well-formed YAML but exceeds a bound of this module (or holds a value Python cannot read)."""


def _refusal(problem: str, mark: yaml.Mark | _LibyamlMark | None) -> YamlLimitError:
    """The refusal of ``problem`` at ``mark``: PyYAML's own kind of mark, or libyaml's when its parser reads."""
    # types-PyYAML admits only PyYAML's Mark here; PyYAML itself raises with libyaml's marks, printed the same way.
    return YamlLimitError(None, None, problem, mark)  # type: ignore[arg-type]


class _Bounds(Composer, SafeConstructor, Resolver):
    """The Python composer, measuring what it composes: the nesting depth, and each node's expanded size and height.

    The events come from whichever parser the loader class puts next to it.
    """

    if TYPE_CHECKING:
        # Supplied by that parser (PyYAML's or libyaml's); while a node is composed there is always a next event.
        def peek_event(self) -> yaml.Event: ...

    def _start_measuring(self) -> None:
        self._depth = 0
        self._alias_values = 0
        # Per composed node (by identity; the nodes live as long as the loader): expanded size and height.
        self._measures: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        """Compose one node, refusing it when it nests or expands past the bounds."""
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = self._compose(parent, index)
            self._count_alias(node, event.start_mark)
            return node
        nests = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if nests and self._depth >= MAX_DEPTH:
            raise _refusal(_NESTING, event.start_mark)
        self._depth += nests
        try:
            node = self._compose(parent, index)
        finally:
            self._depth -= nests
        self._measures[id(node)] = self._measure(node)
        return node

    def _compose(self, parent: Node | None, index: Any) -> Node:
        node = super().compose_node(parent, index)
        # PyYAML's composer returns a node for every node event (an alias: its anchor's); the stub allows None.
        assert node is not None
        return node

    def _measure(self, node: Node) -> tuple[int, int]:
        """Expanded size and height of ``node`` from those of its children, which are composed already."""
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            return 1, 0
        measures = [self._measures[id(child)] for child in children]
        return 1 + sum(size for size, _ in measures), 1 + max((height for _, height in measures), default=0)

    def _count_alias(self, node: Node, mark: yaml.Mark | _LibyamlMark | None) -> None:
        measure = self._measures.get(id(node))
        if measure is None:
            # The anchored collection is still open: the alias would make the data contain itself.
            raise _refusal("an alias refers to the collection that holds it (a structure that never ends)", mark)
        size, height = measure
        if self._depth + height > MAX_DEPTH:
            raise _refusal(f"nested deeper than {MAX_DEPTH} levels once aliases are expanded", mark)
        self._alias_values += size
        if self._alias_values > MAX_ALIAS_VALUES:
            raise _refusal(
                f"aliases expand to more than {MAX_ALIAS_VALUES:,} values (an alias bomb?); "
                "write the shared part out where it is used",
                mark,
            )

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """Construct one value; a scalar Python cannot read (a 5,000-digit number, 30 February) is a marked error."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:
            reason = str(exc).split(";", 1)[0]  # past ';' Python suggests interpreter settings, no help here
            raise YamlLimitError(
                None, None, f"the value cannot be read ({reason}); quote it to keep it as text", node.start_mark
            ) from None


class _Loader(Protocol):
    """What :func:`load_yaml` asks of a bounded loader."""

    def get_single_data(self) -> Any: ...

    def dispose(self) -> None: ...


_BoundedLoader: Callable[[str], _Loader]

try:
    from yaml._yaml import CParser  # where yaml.cyaml takes it from; absent when PyYAML is built without libyaml
except ImportError:  # PyYAML built without libyaml: the Python parser, slower on hostile input but as safe

    class _PythonBoundedLoader(_Bounds, yaml.SafeLoader):
        """The bounded composer over PyYAML's Python reader, scanner and parser."""

        def __init__(self, stream: str) -> None:
            yaml.SafeLoader.__init__(self, stream)
            self._start_measuring()

    _BoundedLoader = _PythonBoundedLoader

else:
    # libyaml's parser: the Python scanner needs seconds to look ahead through a thousand open brackets.
    class _LibyamlBoundedLoader(_Bounds, CParser):
        """The bounded composer over libyaml's scanner and parser."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._start_measuring()

    _BoundedLoader = _LibyamlBoundedLoader


def load_yaml(text: str) -> Any:
    """The one document in ``text``; raises :class:`yaml.YAMLError` (:class:`YamlLimitError` past a bound)."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in (exc.problem or ""):
            # libyaml's own guard (1,000 levels) fired while it scanned ahead, before ours was reached.
            raise YamlLimitError(None, None, _NESTING, exc.problem_mark) from None
        raise
    finally:
        loader.dispose()
