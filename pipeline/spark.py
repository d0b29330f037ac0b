"""The Spark session the job runs in: local mode sized for a small machine, plus connector jars when asked."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from .datasource import MoldauDataSource

# a directory of the built-in Kafka connector's jars, for machines that cannot download them
KAFKA_JARS_ENV = "MOLDAU_SPARK_KAFKA_JARS"
KAFKA_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def kafka_connector_conf() -> dict[str, str]:
    """Spark config that puts the Kafka connector on the classpath: local jars if configured, else the package."""
    jars_dir = os.environ.get(KAFKA_JARS_ENV)
    if not jars_dir:
        return {"spark.jars.packages": KAFKA_PACKAGE}
    jars = sorted(str(p) for p in Path(jars_dir).glob("*.jar"))
    if not jars:
        raise FileNotFoundError(f"{KAFKA_JARS_ENV}={jars_dir} holds no .jar files")
    return {"spark.jars": ",".join(jars)}


def session(*, master: str = "local[2]", kafka_connector: bool = False) -> SparkSession:
    """A session with the ``moldau`` format registered (and the ``kafka`` one if ``kafka_connector``)."""
    # Python workers must run this interpreter, which has the pipeline's packages
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):  # driver and executors are this one JVM: listen on loopback only
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName("moldau-pipeline")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for name, value in (kafka_connector_conf() if kafka_connector else {}).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(MoldauDataSource)
    return spark
