"""Exactly-once checking: a self-describing workload format (``workload``), real-client
workload processes that write it (``workloads``), and the checker behind
``moldau verify`` (``checker``)."""
