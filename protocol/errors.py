"""What the codec raises on bytes it cannot read."""


class CorruptRecord(ValueError):
    """A batch failed validation (maps to CORRUPT_MESSAGE)."""
