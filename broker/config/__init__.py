"""Configuration: the broker's settings, dynamic configs and the topic and group config tables."""
