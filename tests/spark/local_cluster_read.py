"""Read a topic through the gregor source on Spark's `local-cluster[2,1,1024]`: a master, two
workers and their executors as separate JVMs, each with Python workers of its own. Prints
one JSON line per row (key, value, partition, offset) and the executors' process ids.

    python local_cluster_read.py BOOTSTRAP TOPIC
"""

from __future__ import annotations

import json
import os
import sys

import pyspark
from pyspark.sql import SparkSession

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
# local-cluster starts executors with the launcher found under SPARK_HOME.
os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))


def main(bootstrap: str, topic: str) -> None:
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "512m")
        .getOrCreate()
    )
    try:
        df = (
            spark.read.format("gregor")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
        )
        for row in df.collect():
            print(
                json.dumps(
                    [
                        None if row.key is None else row.key.hex(),
                        None if row.value is None else row.value.hex(),
                        row.partition,
                        row.offset,
                    ]
                )
            )
        executors = spark.sparkContext._jsc.sc().getExecutorIds()
        print(json.dumps({"executors": executors.size()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
