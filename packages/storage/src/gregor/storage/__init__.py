"""gregor-storage: the segmented on-disk log engine, in Kafka's formats."""
