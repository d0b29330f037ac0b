"""Kafka's security model: TLS listeners, SASL authentication, ACL authorization."""
