"""Found by PySpark's data source lookup (a top-level module named pyspark_*): with
gregor-spark installed, `spark.read.format("gregor")` works without `register()`."""

from gregor.spark.source import GregorDataSource as DefaultSource

__all__ = ["DefaultSource"]
