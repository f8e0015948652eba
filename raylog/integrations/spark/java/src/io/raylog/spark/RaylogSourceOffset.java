package io.raylog.spark;

import java.util.Collections;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/** A stream's position: the next offset of each partition, as JSON like Spark's Kafka
 * source writes it ({@code {"topic":{"0":23,"1":5}}}), which is what the checkpoint holds. */
public final class RaylogSourceOffset extends Offset {
  public final SortedMap<TopicPartition, Long> offsets;

  public RaylogSourceOffset(SortedMap<TopicPartition, Long> offsets) {
    this.offsets = Collections.unmodifiableSortedMap(new TreeMap<>(offsets));
  }

  public static RaylogSourceOffset parse(String json) {
    return new RaylogSourceOffset(OffsetsJson.parsePartitionValues(json, "offset"));
  }

  @Override
  public String json() {
    return OffsetsJson.format(offsets);
  }
}
