"""The package version, in a module of its own so that anything can read it without importing
the public API (``loadtest/__init__`` imports the session, which imports nearly everything)."""

__version__ = "0.1.0"
