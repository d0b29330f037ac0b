"""The web console (`moldau console`): server-rendered pages about any Kafka cluster, built on the admin client
(broker/admin/client.py) and so speaking only the Kafka protocol. docs/console.md describes it."""
