"""gregor-spark: Spark reads and writes Gregor (and Kafka) topics with spark-sql-kafka's schema
and options, as the PySpark data source `gregor`.

    from gregor.spark import register
    register(spark)  # or nothing: PySpark finds the source by itself where it looks
    spark.read.format("gregor").option("kafka.bootstrap.servers", ...).option(
        "subscribe", "orders").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gregor.spark.options import OptionError
from gregor.spark.planning import DataLossError, OffsetRange
from gregor.spark.source import GregorDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `format("gregor")` known to this Spark session."""
    spark.dataSource.register(GregorDataSource)


__all__ = ["DataLossError", "GregorDataSource", "OffsetRange", "OptionError", "register"]
