"""The client-facing network layer: listeners, connections, sessions, quotas and throttling."""
