"""gregor-tools: the `gregor` command line, Kafka's operator scripts in one command.

    gregor topics describe --bootstrap-server host:9092 --topic orders
    gregor groups describe --bootstrap-server host:9092 --group billing --json

It works against any Kafka-protocol cluster (Gregor or Apache Kafka) through gregor-client's
admin API only; `gregor dump-log` reads a log directory's files directly.
"""

__version__ = "0.1.0"
