"""Serving Fetch: reading the logs, fetch sessions (KIP-227) and the fetch purgatory."""
