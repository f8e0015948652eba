package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code spark.readStream.format("raylog")}: micro-batches of offset ranges, as Spark's Kafka
 * source makes them. The stream's first offsets (from {@code startingOffsets}) are written
 * once to the checkpoint, so a query restarted before its first batch committed starts from
 * the same place; afterwards Spark's own offset log holds where each batch ends, so a
 * restarted query goes on from the last committed batch: nothing skipped, nothing read twice
 * (within Spark's usual exactly-once for idempotent sinks). A batch ends at the partitions'
 * high watermarks, at most {@code maxOffsetsPerTrigger} records further, shared by what each
 * partition has waiting; under {@code Trigger.AvailableNow}, at the high watermarks seen when
 * the query started. Partitions that appear later are read from their earliest offset.
 */
final class RaylogMicroBatchStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private static final Logger LOG = LoggerFactory.getLogger(RaylogMicroBatchStream.class);
  static final String INITIAL_OFFSETS_FILE = "raylog-initial-offsets.json";

  private final RaylogOptions options;
  private final String[] columns;
  private final AvroValues avro;
  private final Path initialOffsetsFile;
  private final Configuration hadoopConf;
  private SortedMap<TopicPartition, Long> availableNow;
  private SortedMap<TopicPartition, Long> latestSeen;

  RaylogMicroBatchStream(RaylogOptions options, String[] columns, AvroValues avro,
      String checkpointLocation) {
    if (options.ending.kind != Bound.Kind.LATEST) {
      throw new IllegalArgumentException("Ending offsets are not valid in streaming queries on "
          + "raylog: the stream reads on as records arrive");
    }
    this.options = options;
    this.columns = columns;
    this.avro = avro;
    this.initialOffsetsFile = new Path(checkpointLocation, INITIAL_OFFSETS_FILE);
    this.hadoopConf = SparkSession.active().sessionState().newHadoopConf();
  }

  @Override
  public Offset initialOffset() {
    try {
      FileSystem fs = initialOffsetsFile.getFileSystem(hadoopConf);
      if (fs.exists(initialOffsetsFile)) {
        try (InputStream in = fs.open(initialOffsetsFile)) {
          String json = new String(in.readAllBytes(), StandardCharsets.UTF_8);
          LOG.info("initial offsets from the checkpoint: {}", json);
          return RaylogSourceOffset.parse(json);
        }
      }
      RaylogSourceOffset first = new RaylogSourceOffset(startingOffsets());
      Path temporary = initialOffsetsFile.suffix(".tmp");
      try (OutputStream out = fs.create(temporary, true)) {
        out.write(first.json().getBytes(StandardCharsets.UTF_8));
      }
      if (!fs.rename(temporary, initialOffsetsFile)) {
        throw new IOException("could not rename " + temporary + " to " + initialOffsetsFile);
      }
      LOG.info("initial offsets {} written to the checkpoint", first.json());
      return first;
    } catch (IOException e) {
      throw new IllegalStateException("cannot keep the stream's initial offsets in "
          + initialOffsetsFile + ": " + e, e);
    }
  }

  private SortedMap<TopicPartition, Long> startingOffsets() {
    Cluster cluster = Cluster.get();
    Map<TopicPartition, PartitionOffsets> offsets = new TreeMap<>();
    List<TopicPartition> partitions = cluster.partitions(options);
    SortedMap<TopicPartition, Long> starts = RaylogScan.starts(cluster, options, partitions,
        offsets, TieredSplit.plan(cluster, partitions, options));
    // Checked now as a batch's would be: a start that is not there follows failOnDataLoss.
    for (Map.Entry<TopicPartition, Long> e : starts.entrySet()) {
      e.setValue(RangePlanner.checked(e.getKey(), e.getValue(), offsets.get(e.getKey()),
          options.failOnDataLoss, "starting"));
    }
    return starts;
  }

  @Override
  public Offset deserializeOffset(String json) {
    return RaylogSourceOffset.parse(json);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return options.maxOffsetsPerTrigger == null ? ReadLimit.allAvailable()
        : ReadLimit.maxRows(options.maxOffsetsPerTrigger);
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    availableNow = latest().getValue();
    LOG.info("Trigger.AvailableNow reads up to {}", OffsetsJson.format(availableNow));
  }

  /** The partitions read now with their offsets, and their high watermarks. */
  private Map.Entry<Map<TopicPartition, PartitionOffsets>, SortedMap<TopicPartition, Long>>
      latest() {
    Cluster cluster = Cluster.get();
    Map<TopicPartition, PartitionOffsets> offsets = cluster.offsets(cluster.partitions(options),
        tp -> null, options);
    SortedMap<TopicPartition, Long> high = new TreeMap<>();
    for (Map.Entry<TopicPartition, PartitionOffsets> e : offsets.entrySet()) {
      high.put(e.getKey(), e.getValue().latest);
    }
    return Map.entry(offsets, high);
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is the one to call");
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    SortedMap<TopicPartition, Long> from = new TreeMap<>(((RaylogSourceOffset) start).offsets);
    Map.Entry<Map<TopicPartition, PartitionOffsets>, SortedMap<TopicPartition, Long>> now =
        latest();
    SortedMap<TopicPartition, Long> until = availableNow != null ? availableNow : now.getValue();
    for (Map.Entry<TopicPartition, PartitionOffsets> e : now.getKey().entrySet()) {
      if (until.containsKey(e.getKey())) {
        from.putIfAbsent(e.getKey(), e.getValue().logStart); // a new partition: from earliest
      }
    }
    latestSeen = until;
    SortedMap<TopicPartition, Long> end = new TreeMap<>(until);
    for (Map.Entry<TopicPartition, Long> e : from.entrySet()) {
      Long high = end.get(e.getKey());
      if (high != null && high < e.getValue()) {
        end.put(e.getKey(), e.getValue()); // never backwards: planning reports the loss
      }
    }
    if (limit instanceof ReadMaxRows) {
      end = RangePlanner.rateLimit(from, end, ((ReadMaxRows) limit).maxRows());
    }
    for (Map.Entry<TopicPartition, Long> e : ((RaylogSourceOffset) start).offsets.entrySet()) {
      end.putIfAbsent(e.getKey(), e.getValue()); // a partition gone: kept where it was
    }
    return new RaylogSourceOffset(end);
  }

  @Override
  public Offset reportLatestOffset() {
    return latestSeen == null ? null : new RaylogSourceOffset(latestSeen);
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    SortedMap<TopicPartition, Long> from = ((RaylogSourceOffset) start).offsets;
    SortedMap<TopicPartition, Long> until = new TreeMap<>(((RaylogSourceOffset) end).offsets);
    Cluster cluster = Cluster.get();
    List<TopicPartition> existing = new ArrayList<>();
    for (TopicPartition tp : until.keySet()) {
      boolean exists;
      try {
        exists = tp.partition < cluster.topic(tp.topic, false).partitions.size();
      } catch (RaylogException e) {
        if (!e.type.equals("UnknownTopicError")) {
          throw e;
        }
        exists = false;
      }
      if (exists) {
        existing.add(tp);
      } else {
        String what = tp + " was deleted: its records from " + from.get(tp) + " are not read.";
        if (options.failOnDataLoss) {
          throw new RangePlanner.DataLossException(what);
        }
        LOG.warn("{} Going on (failOnDataLoss is false).", what);
      }
    }
    until.keySet().retainAll(existing);
    Map<TopicPartition, PartitionOffsets> offsets = cluster.offsets(existing, tp -> null,
        options);
    // Offsets below a tiered partition's local log start (a stream starting from earliest,
    // or far behind) are read from the object store, as in a batch read. Only the partitions
    // this batch reads from below it are planned: a stream that keeps up reads hot data
    // alone, and starts no planning task (a Python worker) at every trigger.
    JsonNode plan = TieredSplit.plan(cluster,
        TieredSplit.behindLocalStart(existing, from, offsets), options);
    TieredSplit.lowerStarts(plan, offsets);
    List<OffsetRange> ranges = RangePlanner.ranges(from, until, offsets, options.failOnDataLoss,
        RaylogScan.hostsOf(cluster));
    return RaylogScan.tasks(TieredSplit.lay(plan, ranges), offsets, options);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ReaderFactory(columns, options, avro);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {}
}
