"""Sans-io Kafka wire protocol: framing, message codecs and record batch headers."""
