"""Topics as Spark DataFrames, with Spark itself running on the Ray cluster (RayDP).

The data source is ``format("raylog")``, a Java DataSource V2 connector
(raylog/integrations/spark/java, built by raylog.integrations.spark.build and put on the
classpaths by :func:`session`) with the options and schema of Spark's Kafka source:
``spark.read.format("raylog").option("subscribe", t)``, ``spark.readStream...``,
``df.write.format("raylog")`` and ``writeStream.format("raylog")``. Its readers take Arrow
batches straight from the brokers into ColumnarBatches (see docs/spark.md).

The functions here are thin Python conveniences over it: ``read`` resolves raylog bounds
(offsets, timestamps, per partition) to exact offsets now; ``write`` returns how many
records it wrote; ``micro_batches`` turns a consumer group's progress into DataFrames.
``read(..., via="arrow")`` keeps the older path (Python workers handing Arrow tables to
Spark with ``mapInArrow``) as a fallback where the connector cannot be built.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import ray

from raylog.client.connection import RaylogCluster, cluster_or_default
from raylog.errors import InvalidArgumentError, InvalidRecordError, RaylogError
from raylog.integrations.ray_data import (
    DEFAULT_BLOCK_RECORDS,
    check_write,
    offset_ranges,
    write_dataset,
)
from raylog.integrations.ray_data.ranges import EARLIEST, LATEST, Bound, spec_for
from raylog.integrations.spark.cold import cold_plan
from raylog.integrations.spark.workers import python_frame
from raylog.metadata.topics import topic_names
from raylog.records.kafka_columns import KAFKA_SCHEMA
from raylog.replica.partition import READ_UNCOMMITTED
from raylog.session import init
from raylog.types import TopicPartition
from raylog.util.arguments import (
    INT32_MAX,
    check_bool,
    check_id,
    check_int,
    check_timeout,
    short_repr,
)
from raylog.util.interop import ERROR_MARK

logger = logging.getLogger(__name__)

# Without these, RayDP's Java actors crash converting between Spark and Ray on Java 17.
_OPENS = ["java.lang", "java.lang.invoke", "java.io", "java.net", "java.nio", "java.math",
          "java.text", "java.util", "java.util.concurrent", "java.util.concurrent.atomic",
          "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar"]
JAVA17_OPTIONS = "-XX:+IgnoreUnrecognizedVMOptions " + " ".join(
    f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in _OPENS)

_TIMESTAMP = KAFKA_SCHEMA.get_field_index("timestamp")
_WITHOUT_HEADERS = KAFKA_SCHEMA.remove(KAFKA_SCHEMA.get_field_index("headers"))

_session: Any = None


def session(app_name: str = "raylog", *, executors: int = 1, cores: int = 1,
            memory: str = "1GB", configs: dict[str, str] | None = None) -> Any:
    """Start (or return the running) RayDP Spark session on this Ray cluster.

    Defaults fit a small machine: one executor with one core and 1 GB. Sets the Java 17
    module flags and ``PYSPARK_PYTHON`` (this interpreter), which RayDP needs.
    """
    global _session
    check_id("app_name", app_name, InvalidArgumentError)
    check_int("executors", executors, 1, INT32_MAX)
    check_int("cores", cores, 1, INT32_MAX)
    if not isinstance(memory, str) or not memory:
        raise InvalidArgumentError(f"memory must be a size such as '1GB', got {memory!r}")
    if configs is not None and not (isinstance(configs, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in configs.items())):
        raise InvalidArgumentError(f"configs must map Spark setting names to strings, got "
                                   f"{short_repr(configs)}")
    if _session is not None:
        return _session
    import raydp

    if not ray.is_initialized():
        init()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {
        "spark.driver.extraJavaOptions": JAVA17_OPTIONS,
        "spark.executor.extraJavaOptions": JAVA17_OPTIONS,
        "spark.ray.raydp_app_master.extraJavaOptions": JAVA17_OPTIONS,
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        **(configs or {}),
    }
    _add_connector(settings)
    _session = raydp.init_spark(app_name, num_executors=executors, executor_cores=cores,
                                executor_memory=memory, configs=settings)
    return _session


def _add_connector(settings: dict[str, str]) -> None:
    """Put the connector's jar (``format("raylog")``) on the driver's and executors'
    classpaths, after whatever the caller's settings already hold."""
    from raylog.integrations.spark.build import connector_jar

    jar = str(connector_jar())
    for key, separator in (("spark.jars", ","), ("spark.driver.extraClassPath", os.pathsep),
                           ("spark.executor.extraClassPath", os.pathsep)):
        settings[key] = separator.join(v for v in (settings.get(key), jar) if v)


def stop() -> None:
    """Stop the session :func:`session` started."""
    global _session
    if _session is None:
        return
    import raydp

    raydp.stop_spark()
    _session = None


def _spark_schema(include_headers: bool = True) -> Any:
    """KAFKA_SCHEMA as a Spark schema, without ``headers`` unless ``include_headers``."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(KAFKA_SCHEMA if include_headers else _WITHOUT_HEADERS)


VIA = ("connector", "arrow")


def read(spark: Any, topics: str | Iterable[str], starting_offsets: Bound = EARLIEST,
         ending_offsets: Bound = LATEST, *, cluster: RaylogCluster | None = None,
         max_records_per_task: int | None = None, include_headers: bool = True,
         via: str = "connector", value_format: str | None = None,
         value_schema: str | dict | None = None) -> Any:
    """Records of ``topics`` in ``[starting_offsets, ending_offsets)`` as a Spark DataFrame
    with the columns of Spark's Kafka source (key, value, topic, partition, offset,
    timestamp, timestampType, and headers unless ``include_headers`` is false). Bounds as in
    :func:`raylog.integrations.ray_data.read_topic`, resolved and checked now (UnknownTopicError,
    OffsetOutOfRangeError, InvalidOffsetRangeError); the DataFrame reads exactly those
    offsets at every action.

    ``via="connector"`` (the default) is ``spark.read.format("raylog")`` with the resolved
    offsets as ``assign``, ``startingOffsets`` and ``endingOffsets``: one task per
    partition's range, cut into pieces of at most ``max_records_per_task`` records if set.
    ``via="arrow"`` is the fallback without the connector: Spark's Python workers read the
    ranges as Arrow tables and hand them to Spark with ``mapInArrow``.

    ``value_format="avro"``: values in Confluent's wire format become typed columns of the
    reader schema (``value_schema``, else the latest of ``<topic>-value``): the record's
    fields, then the Kafka columns they do not shadow. With ``via="connector"`` that is the
    connector's ``valueFormat`` ``avro`` (decoded in the JVM, typed as Spark's
    ``from_avro`` types them); with ``via="arrow"``, Spark's Python workers decode with
    fastavro (raylog/integrations/spark/avro.py).

    >>> df = read(session(), "pageviews")
    >>> df.groupBy("partition").count().show()
    """
    _check_session(spark)
    if max_records_per_task is not None:
        check_int("max_records_per_task", max_records_per_task, 1)
    check_bool("include_headers", include_headers)
    if via not in VIA:
        raise InvalidArgumentError(f"via must be one of {VIA}, got {short_repr(via)}")
    if value_format not in (None, "avro"):
        raise InvalidArgumentError(f"value_format must be None or 'avro', got "
                                   f"{short_repr(value_format)}")
    ranges = offset_ranges(topics, starting_offsets, ending_offsets, cluster=cluster)
    # The cold pieces (remote segments below the local log starts) are planned here, with
    # the offsets, and read by the connector's tasks from the object store.
    tiered = {"tieredPlan": cold_plan(cluster_or_default(cluster), ranges, READ_UNCOMMITTED)}
    if value_format == "avro":
        from raylog.integrations.ray_data.avro import given_schema, reader_schema
        from raylog.integrations.spark.avro import avro_frame, value_fields_first

        names = topic_names(topics)
        if via == "arrow" or not ranges:
            return avro_frame(spark, ranges, max_records_per_task or DEFAULT_BLOCK_RECORDS,
                              include_headers, reader_schema(names, value_schema))
        inline = given_schema(names, value_schema)
        options = {"valueFormat": "avro", **({"valueSchema": inline} if inline else {}),
                   **tiered}
        try:  # loading asks the registry for the reader schema
            frame = _connector_frame(spark, ranges, max_records_per_task, include_headers,
                                     options)
        except Exception as e:
            raise _spark_error(e) from e
        return value_fields_first(frame)
    if via == "arrow":
        return _frame(spark, ranges, max_records_per_task or DEFAULT_BLOCK_RECORDS,
                      include_headers)
    return _connector_frame(spark, ranges, max_records_per_task, include_headers, tiered)


def _connector_frame(spark: Any, ranges: dict[TopicPartition, tuple[int, int]],
                     max_records_per_task: int | None, include_headers: bool,
                     options: dict[str, str] | None = None) -> Any:
    """``format("raylog")`` over exactly these ranges, with these further options."""
    if not ranges:
        return spark.createDataFrame([], _spark_schema(include_headers))
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for tp, (first, last) in sorted(ranges.items()):
        assign.setdefault(tp.topic, []).append(tp.partition)
        starts.setdefault(tp.topic, {})[str(tp.partition)] = first
        ends.setdefault(tp.topic, {})[str(tp.partition)] = last
    reader = (spark.read.format("raylog")
              .option("assign", json.dumps(assign))
              .option("startingOffsets", json.dumps(starts))
              .option("endingOffsets", json.dumps(ends))
              .option("includeHeaders", str(include_headers).lower()))
    if max_records_per_task is not None:
        reader = reader.option("maxRecordsPerPartition", str(max_records_per_task))
    return reader.options(**(options or {})).load()


def _check_session(spark: object) -> None:
    from pyspark.sql import SparkSession

    if not isinstance(spark, SparkSession):
        raise InvalidArgumentError(f"expected a SparkSession (raylog.integrations.spark."
                                   f"session()), got {short_repr(spark)}")


def _frame(spark: Any, ranges: dict[TopicPartition, tuple[int, int]],
           max_records_per_task: int, include_headers: bool) -> Any:
    """The DataFrame of resolved, checked offset ranges (see :func:`read`)."""
    return python_frame(spark, ranges, max_records_per_task, _spark_schema(include_headers),
                        functools.partial(_kafka_for_spark, include_headers))


def _kafka_for_spark(include_headers: bool, table: Any) -> Any:
    """A Kafka table as Spark's Arrow bridge takes it: timestamps in microseconds, UTC;
    headers only if asked for."""
    import pyarrow as pa

    table = table.set_column(_TIMESTAMP, "timestamp", table.column(_TIMESTAMP).cast(
        pa.timestamp("us", tz="UTC")))
    return table if include_headers else table.drop_columns(["headers"])


def write(frame: Any, topic: str, *, cluster: RaylogCluster | None = None,
          producer_settings: dict[str, Any] | None = None) -> int:
    """Produce a Spark DataFrame (or a Ray Dataset) with a ``value`` column, and optional
    ``key``, ``partition`` and ``headers`` columns (a Ray Dataset also ``timestamp``), to
    ``topic``; keys are partitioned as Kafka's clients would. Returns the number of records
    written. A DataFrame goes through the connector's sink (as
    ``df.write.format("raylog").option("topic", topic)``, with ``producer_settings`` as
    ``producer.*`` options).

    Raises InvalidRecordError, writing nothing, when there is no ``value`` column.
    """
    from pyspark.sql import DataFrame

    settings = check_write(topic, cluster, producer_settings)  # before converting anything
    if isinstance(frame, ray.data.Dataset):
        return write_dataset(frame, topic, cluster=cluster, producer_settings=producer_settings)
    if not isinstance(frame, DataFrame):
        raise InvalidArgumentError(f"expected a Spark DataFrame or a ray.data.Dataset, got "
                                   f"{short_repr(frame)}")
    if "value" not in frame.columns:
        raise InvalidRecordError(
            f"a DataFrame to write needs a 'value' column; it has {frame.columns}")
    jvm = frame.sparkSession._jvm
    options = jvm.java.util.HashMap()
    options.put("topic", topic)
    for key, value in settings.items():
        options.put(f"producer.{key}", json.dumps(value) if not isinstance(value, str) else value)
    try:
        return int(jvm.io.raylog.spark.RaylogSourceProvider.save(frame._jdf, options))
    except Exception as e:
        raise _spark_error(e) from e


def _spark_error(error: Exception) -> Exception:
    """A raylog error a Java call failed with, as its Python type; else ``error``."""
    from raylog import errors
    from raylog.schemas import errors as schema_errors

    text = str(error)
    marker = text.find(ERROR_MARK)
    end = text.find(ERROR_MARK, marker + len(ERROR_MARK)) if marker >= 0 else -1
    if end < 0:
        return error
    detail = json.loads(text[marker + len(ERROR_MARK):end])
    kind = getattr(errors, detail.get("type", ""), None) or \
        getattr(schema_errors, detail.get("type", ""), None)
    if isinstance(kind, type) and issubclass(kind, RaylogError):
        return kind(detail.get("message", ""))
    return RaylogError(detail.get("message", ""))


def micro_batches(spark: Any, topics: str | Iterable[str], group_id: str, *,
                  starting_offsets: Bound = EARLIEST,
                  max_records_per_partition: int | None = None,
                  poll_interval_s: float = 1.0, max_batches: int | None = None,
                  stop_when_idle: bool = False,
                  cluster: RaylogCluster | None = None) -> Iterator[Any]:
    """Yield one DataFrame per micro-batch of records new to consumer group ``group_id``.

    A batch runs from the group's committed offsets (``starting_offsets`` where it has none)
    to the current end of each partition (at most ``max_records_per_partition`` further).
    Its offsets are committed when the loop asks for the next batch, that is only after the
    caller's processing of this one returned: a job that crashes and restarts processes the
    batch it was in again, and never skips one. Waits ``poll_interval_s`` between empty
    checks; ends after ``max_batches`` batches, or at the first empty check with
    ``stop_when_idle``. The group must have no subscribed members (it is used for its
    committed offsets only).

    >>> for df in micro_batches(session(), "pageviews", "hourly-report", max_batches=3):
    ...     df.groupBy("partition").count().write.parquet(...)
    """
    _check_session(spark)
    names = topic_names(topics)
    check_id("group_id", group_id, InvalidArgumentError)
    if max_records_per_partition is not None:
        check_int("max_records_per_partition", max_records_per_partition, 1)
    check_timeout("poll_interval_s", poll_interval_s)
    if max_batches is not None:
        check_int("max_batches", max_batches)
    check_bool("stop_when_idle", stop_when_idle)
    # A malformed bound is refused now rather than at the first batch.
    spec_for(starting_offsets, TopicPartition(names[0], 0), EARLIEST, "starting_offsets")
    return _micro_batches(spark, names, group_id, starting_offsets, max_records_per_partition,
                          poll_interval_s, max_batches, stop_when_idle,
                          cluster_or_default(cluster))


def _micro_batches(spark: Any, names: list[str], group_id: str, starting_offsets: Bound,
                   max_records_per_partition: int | None, poll_interval_s: float,
                   max_batches: int | None, stop_when_idle: bool,
                   cluster: RaylogCluster) -> Iterator[Any]:
    """The generator of :func:`micro_batches`, its arguments checked."""
    controller = cluster.controller
    produced = 0
    while max_batches is None or produced < max_batches:
        tps = [TopicPartition(name, p) for name in names
               for p in range(cluster.topic(name).num_partitions)]
        committed = controller.committed_offsets(group_id, [tuple(tp) for tp in tps])
        starts = {tp: spec_for(starting_offsets, tp, EARLIEST, "starting_offsets")
                  if committed.get(tuple(tp)) is None else committed[tuple(tp)][0]
                  for tp in tps}
        batch = {}
        for tp, (first, end) in offset_ranges(names, starts, LATEST, cluster=cluster).items():
            last = end if max_records_per_partition is None else \
                min(end, first + max_records_per_partition)
            batch[tp] = (first, last)
        if all(first == last for first, last in batch.values()):
            if stop_when_idle:
                return
            time.sleep(poll_interval_s)
            continue
        yield _connector_frame(spark, batch, None, include_headers=True)
        # The caller's processing of ``frame`` returned: the batch is done.
        controller.commit_offsets(group_id, None, -1,
                                  [(tp.topic, tp.partition, last, "micro-batch")
                                   for tp, (_, last) in batch.items()])
        produced += 1
        logger.info("micro-batch %d of group %s committed", produced, group_id)
