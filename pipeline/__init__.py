"""A Spark Structured Streaming pipeline on Moldau, exactly once from input topic to output topic.

``job`` reads JSON events (``events``) with the built-in ``kafka`` format or
the ``moldau`` format (``source``, ``sink``, ``datasource``: Spark's Python
Data Source API, no jars), counts and sums them per key and event-time
window, and writes the totals with the ``moldau`` sink, which commits each
micro-batch's output exactly once. ``generate`` produces input in
transactions, some of them aborted. ``cli`` is ``moldau pipeline``.
"""

import logging

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> None:
    """INFO to stderr; Spark runs the source and sink in Python worker processes that need this too."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
