"""Page-view analytics with Spark on Ray: top pages per minute and per service.

Reads the page views that ``raylog demo`` writes to the ``pageviews`` topic (values are JSON
documents with ``service``, ``user``, ``page`` and ``duration_ms``), counts views per
(minute, service, page) with Spark running on the Ray cluster through RayDP, keeps the top
``top_n`` pages of every minute and service, and writes the result back to a topic as JSON
records keyed by ``<service>|<minute>``.

Run it after the demo, on the same cluster::

    raylog demo            # or any producer of page views
    python examples/pageview_analytics.py [--input pageviews] [--output pageview-stats]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

PAGE_VIEW_SCHEMA = "service STRING, user STRING, page STRING, duration_ms INT"


def top_pages(spark: Any, input_topic: str, top_n: int = 3, *, cluster: Any = None) -> Any:
    """A DataFrame of (minute, service, page, views, rank) for the top pages."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # The connector (Spark's Kafka source options); only the timestamp and value columns
    # are used, so only they leave the brokers.
    views = (spark.read.format("raylog").option("subscribe", input_topic)
             .option("startingOffsets", "earliest").load())
    parsed = views.select(
        F.date_trunc("minute", F.col("timestamp")).alias("minute"),
        F.from_json(F.col("value").cast("string"), PAGE_VIEW_SCHEMA).alias("view"),
    ).select("minute", "view.service", "view.page")
    counts = parsed.groupBy("minute", "service", "page").agg(F.count("*").alias("views"))
    ranking = Window.partitionBy("minute", "service").orderBy(F.desc("views"), F.asc("page"))
    return (counts.withColumn("rank", F.row_number().over(ranking))
            .where(F.col("rank") <= top_n))


def run(spark: Any, input_topic: str = "pageviews", output_topic: str = "pageview-stats",
        top_n: int = 3, *, cluster: Any = None) -> int:
    """Compute the top pages and write them to ``output_topic`` (through the connector's
    sink, as ``top.write.format("raylog")`` would); returns records written."""
    from pyspark.sql import functions as F

    from raylog import Admin
    from raylog.integrations import spark as raylog_spark

    admin = Admin(cluster=cluster)
    if output_topic not in admin.list_topics():
        admin.create_topic(output_topic, partitions=2)
    top = top_pages(spark, input_topic, top_n, cluster=cluster)
    records = top.select(
        F.concat_ws("|", "service", F.date_format("minute", "yyyy-MM-dd'T'HH:mm"))
        .cast("binary").alias("key"),
        F.to_json(F.struct(
            F.date_format("minute", "yyyy-MM-dd'T'HH:mm").alias("minute"),
            "service", "page", "views", "rank",
        )).cast("binary").alias("value"),
    )
    return raylog_spark.write(records, output_topic, cluster=cluster)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", default="pageviews")
    parser.add_argument("--output", default="pageview-stats")
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--address", default=None)
    args = parser.parse_args()

    import raylog
    from raylog.integrations import spark as raylog_spark
    from raylog.integrations.ray_data import read_topic

    cluster = raylog.init(args.address, start_local=False)
    spark = raylog_spark.session("pageview-analytics")
    try:
        written = run(spark, args.input, args.output, args.top, cluster=cluster)
        print(f"wrote {written} top-page records to {args.output}")
        for row in read_topic(args.output, cluster=cluster).take(10):
            print(json.loads(row["value"]))
    finally:
        raylog_spark.stop()


if __name__ == "__main__":
    main()
