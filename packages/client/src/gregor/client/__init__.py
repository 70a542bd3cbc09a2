"""gregor-client: Kafka producer, consumer and admin client, sync and async."""
