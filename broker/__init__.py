"""The Moldau broker: asyncio server, request handlers and coordinators."""

__version__ = "0.1.0"  # pyproject.toml reads it; CHANGELOG.md says what each version changed
