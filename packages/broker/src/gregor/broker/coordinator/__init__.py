"""The coordinators: the services whose state lives in an internal topic of the cluster.

Each keys its state by an id (a consumer group id, and later a transactional id) hashed onto a
partition of its internal topic; the broker leading that partition is the id's coordinator.
`group` is the group coordinator (consumer groups and their committed offsets in
`__consumer_offsets`); `internal_topics` creates the internal topics on first use;
`partitioning` maps ids to partitions; `timers` runs their deadlines.
"""
