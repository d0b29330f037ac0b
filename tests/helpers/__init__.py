"""Helpers shared by the integration tests (client wrappers, raw wire frames)."""
