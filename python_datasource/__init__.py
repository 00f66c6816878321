"""``orderedkafka``: a Kafka Python Data Source for Spark that reads each partition in offset
order, exactly once per batch, with integrity tiers, and needs no JAR.

``OrderedKafkaDataSource`` is what ``spark.dataSource.register`` takes; installing the package
also registers it by name (``format("orderedkafka")``) through ``pyspark_orderedkafka``.
"""

from orderedstream.python_datasource.client_config import (
    KafkaSecrets,
    is_secret,
    secrets_from_options,
)
from orderedstream.python_datasource.offsets import KafkaSourceOffset
from orderedstream.python_datasource.options import OrderedKafkaOptions, parse_options
from orderedstream.python_datasource.source import OrderedKafkaDataSource, kafka_schema

__all__ = ["KafkaSecrets", "KafkaSourceOffset", "OrderedKafkaDataSource", "OrderedKafkaOptions",
           "is_secret", "kafka_schema", "parse_options", "secrets_from_options"]
