"""Partition logs on disk: segments, indexes, recovery."""
