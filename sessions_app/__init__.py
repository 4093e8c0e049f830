"""Resumable agent sessions for the web, on Django Channels (docs/embedding.md)."""

# The package's version: pyproject.toml reads it from here, and each version
# has its entry in docs/changelog.md and its git tag (v0.4.0).
__version__ = "0.4.0"
