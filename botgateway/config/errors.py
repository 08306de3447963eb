"""The one error a configuration problem raises, carrying every problem at once."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(Exception):
    """The configuration is unusable; ``problems`` lists each issue with its key path."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        """One line per problem: the dotted key path, what is wrong, and a hint."""
        self.source = source
        """Where the configuration came from (a file path, ``config`` or ``defaults``)."""
        super().__init__(f"{source}: " + "; ".join(problems))
