"""Admin tools spoken over the Kafka protocol: the client (client.py) and one module per `moldau` tool."""
