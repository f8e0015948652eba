package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.function.Function;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A read: a batch (its options checked by the batch rules), or a micro-batch stream (by the
 * streaming rules: only here is it known which it is). Every batch plan resolves the bounds
 * against what the partitions hold now, so a DataFrame reads the topic as it is at each
 * action, like Spark's Kafka source. Ranges become tasks that prefer hosts of in-sync
 * replicas; a pushed-down count becomes one task that reads no record.
 */
final class RaylogScan implements Scan, Batch {
  private final CaseInsensitiveStringMap raw;
  private final StructType schema;
  private final RaylogScanBuilder.CountPlan count;
  private RaylogOptions options;

  RaylogScan(CaseInsensitiveStringMap raw, StructType schema, RaylogScanBuilder.CountPlan count) {
    this.raw = raw;
    this.schema = schema;
    this.count = count;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "raylog " + raw.asCaseSensitiveMap() + (count == null ? " " + schema.simpleString()
        : " count by " + count.groups);
  }

  @Override
  public ColumnarSupportMode columnarSupportMode() {
    return count == null ? ColumnarSupportMode.SUPPORTED : ColumnarSupportMode.UNSUPPORTED;
  }

  @Override
  public Batch toBatch() {
    options = RaylogOptions.forBatch(raw);
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    RaylogOptions streaming = RaylogOptions.forStreaming(raw);
    return new RaylogMicroBatchStream(streaming, KafkaSchema.names(schema),
        AvroValues.of(schema, streaming), checkpointLocation);
  }

  @Override
  public InputPartition[] planInputPartitions() {
    Cluster cluster = Cluster.get();
    List<TopicPartition> partitions = cluster.partitions(options);
    Map<TopicPartition, PartitionOffsets> offsets = new TreeMap<>();
    JsonNode plan = TieredSplit.plan(cluster, partitions, options);
    SortedMap<TopicPartition, Long> starts = starts(cluster, options, partitions, offsets, plan);
    if (options.ending.kind == Bound.Kind.TIMESTAMP
        || options.ending.kind == Bound.Kind.TIMESTAMPS) {
      offsets = cluster.offsets(partitions, options.ending::timestampFor, options);
      TieredSplit.lowerStarts(plan, offsets);
    }
    SortedMap<TopicPartition, Long> ends = RangePlanner.resolve(options.ending, false,
        partitions, offsets, false);
    List<OffsetRange> ranges = RangePlanner.ranges(starts, ends, offsets,
        options.failOnDataLoss, hostsOf(cluster));
    if (count != null) {
      return new InputPartition[] {count.partition(ranges, options)};
    }
    return tasks(TieredSplit.lay(plan, ranges), offsets, options);
  }

  /** Where a read of {@code partitions} starts, as {@code options.starting} says, with the
   * partitions' offsets now put in {@code offsets} (tiered ones starting where {@code plan}
   * says). */
  static SortedMap<TopicPartition, Long> starts(Cluster cluster, RaylogOptions options,
      List<TopicPartition> partitions, Map<TopicPartition, PartitionOffsets> offsets,
      JsonNode plan) {
    offsets.putAll(cluster.offsets(partitions, options.starting::timestampFor, options));
    TieredSplit.lowerStarts(plan, offsets);
    return RangePlanner.resolve(options.starting, true, partitions, offsets,
        options.startingLatestIfNoTimestampMatch);
  }

  /**
   * The Spark tasks of a read: with {@code minPartitions} or {@code maxRecordsPerPartition}
   * set, one per (split) range, as the user laid them out; otherwise ranges packed as Spark
   * packs file splits, at most {@code spark.sql.files.maxPartitionBytes} of stored bytes per
   * task and no more than the total over the session's parallelism.
   */
  static InputPartition[] tasks(List<OffsetRange> ranges,
      Map<TopicPartition, PartitionOffsets> offsets, RaylogOptions options) {
    List<OffsetRange> split = RangePlanner.split(ranges, options.minPartitions,
        options.maxRecordsPerPartition);
    List<InputPartition> out = new ArrayList<>();
    if (options.minPartitions != null || options.maxRecordsPerPartition != null) {
      for (OffsetRange range : split) {
        out.add(new RangePartition(Collections.singletonList(range)));
      }
      return out.toArray(new InputPartition[0]);
    }
    Function<TopicPartition, Double> perRecord = tp -> offsets.containsKey(tp)
        ? offsets.get(tp).bytesPerRecord() : 1.0;
    double total = 0;
    for (OffsetRange range : split) {
      total += range.size() * perRecord.apply(range.tp);
    }
    SparkSession spark = SparkSession.active();
    long maxTaskBytes = Math.min(spark.sessionState().conf().filesMaxPartitionBytes(),
        Math.max(spark.sessionState().conf().filesOpenCostInBytes(),
            (long) (total / Math.max(1, spark.sparkContext().defaultParallelism()))));
    for (List<OffsetRange> task : RangePlanner.pack(split, perRecord, maxTaskBytes)) {
      out.add(new RangePartition(task));
    }
    return out.toArray(new InputPartition[0]);
  }

  static Function<TopicPartition, String[]> hostsOf(Cluster cluster) {
    return tp -> cluster.topic(tp.topic, false).hosts(tp.partition);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    String[] columns = count == null ? KafkaSchema.names(schema) : new String[0];
    return new ReaderFactory(columns, options, count == null ? AvroValues.of(schema, options) : null);
  }
}
