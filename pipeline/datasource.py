"""The ``moldau`` format for Spark: a streaming source and sink over confluent-kafka, no jars needed."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .sink import MoldauStreamWriter
from .source import SCHEMA, MoldauStreamReader


class MoldauDataSource(DataSource):
    """``spark.readStream.format("moldau")`` and ``df.writeStream.format("moldau")``; options as for ``kafka``."""

    @classmethod
    def name(cls) -> str:
        return "moldau"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> MoldauStreamReader:
        return MoldauStreamReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> MoldauStreamWriter:
        return MoldauStreamWriter(self.options, schema)
