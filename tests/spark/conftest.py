"""One local Spark (local[2]) for the whole tests/spark suite: a JVM start costs seconds."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession


def spark_session(master: str, directory: Path) -> SparkSession:
    """A small local Spark whose Python workers are this interpreter (with gregor-spark)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only, whatever the host name says
    return (
        SparkSession.builder.master(master)
        .appName("gregor-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(directory))
        .config("spark.sql.warehouse.dir", str(directory / "warehouse"))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    session = spark_session("local[2]", tmp_path_factory.mktemp("spark"))
    try:
        yield session
    finally:
        session.stop()
