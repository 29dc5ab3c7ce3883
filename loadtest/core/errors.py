"""The exception tree. Each family has one exit code (``loadtest.core.exit_codes``)."""

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


class OutputError(LoadtestError):
    """The output directory cannot be used (taken, unwritable, a bad name). Exit code 2."""


class BackendError(LoadtestError):
    """The system under test could not start, died, or stopped answering. Exit code 4."""
