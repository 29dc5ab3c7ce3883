"""The exception tree. The CLI maps each family to an exit code (see ``cli.py``)."""
from __future__ import annotations


class LoadtestError(Exception):
    """Base of every error loadtest raises on purpose."""


class ScenarioError(LoadtestError):
    """The scenario (file, overrides or referenced files) is invalid. Exit code 2.

    ``problems`` holds one ``"file:line: field.path: message"`` line per problem.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class BackendError(LoadtestError):
    """The system under test could not start or died. Exit code 4."""

