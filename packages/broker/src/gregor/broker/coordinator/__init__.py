"""The coordinators: the services whose state lives in an internal topic of the cluster.

Each keys its state by an id (a consumer group id, and later a transactional id) hashed onto a
partition of its internal topic; the broker leading that partition is the id's coordinator.
`group` is the group coordinator (consumer groups and their committed offsets in
`__consumer_offsets`); `topic_log` is how a coordinator reaches its internal topic (the
broker's `ReplicatedTopic` implements it; `gregor.broker.topic_creation` creates the topics
on first use); `partitioning` maps ids to partitions; `timers` runs their deadlines.
A coordinator sees only these interfaces and the leadership changes the broker's wiring
passes on, never the broker.
"""
