"""Consumer groups: the group coordinator (coordinator.py, classic; consumer_coordinator.py, KIP-848) and
the __consumer_offsets records it persists to. The package imports nothing itself, so a module of it
(the assignors, which the broker's settings name) is read without the coordinator."""
