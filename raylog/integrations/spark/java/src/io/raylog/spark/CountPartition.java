package io.raylog.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A count pushed down to the source: offsets are dense in a topic that is not compacted, so
 * the records of [start, end) number end - start, and COUNT(*) (or a count of a column never
 * null), optionally grouped by topic and/or partition, needs no record read. At run time the
 * ranges' starts are checked against the log starts (retention may have deleted records since
 * the plan), as failOnDataLoss says.
 */
final class CountPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final List<OffsetRange> ranges;
  final boolean byTopic;
  final boolean byPartition;
  final boolean topicFirst; // the order of the group-by columns
  final int counts; // how many count columns (all equal)
  final boolean failOnDataLoss;
  final long fetchTimeoutMs;

  CountPartition(List<OffsetRange> ranges, boolean byTopic, boolean byPartition,
      boolean topicFirst, int counts, boolean failOnDataLoss, long fetchTimeoutMs) {
    this.ranges = ranges;
    this.byTopic = byTopic;
    this.byPartition = byPartition;
    this.topicFirst = topicFirst;
    this.counts = counts;
    this.failOnDataLoss = failOnDataLoss;
    this.fetchTimeoutMs = fetchTimeoutMs;
  }

  /** The result rows: one per group with records (one in all without grouping). */
  List<InternalRow> rows(Map<TopicPartition, PartitionOffsets> now) {
    Map<List<Object>, Long> groups = new LinkedHashMap<>();
    for (OffsetRange range : ranges) {
      PartitionOffsets po = now.get(range.tp);
      long start = range.start;
      if (po != null && start < po.logStart) {
        String what = "Cannot count " + range + ": records below " + po.logStart
            + " were deleted since the query was planned.";
        if (failOnDataLoss) {
          throw new RangePlanner.DataLossException(what);
        }
        start = Math.min(po.logStart, range.end);
      }
      List<Object> key = new ArrayList<>();
      if (byTopic && topicFirst) {
        key.add(range.tp.topic);
      }
      if (byPartition) {
        key.add(range.tp.partition);
      }
      if (byTopic && !topicFirst) {
        key.add(range.tp.topic);
      }
      groups.merge(key, range.end - start, Long::sum);
    }
    List<InternalRow> out = new ArrayList<>();
    if (!byTopic && !byPartition) {
      groups.putIfAbsent(new ArrayList<>(), 0L); // a count of nothing is one row of 0
    }
    for (Map.Entry<List<Object>, Long> group : groups.entrySet()) {
      if ((byTopic || byPartition) && group.getValue() == 0) {
        continue; // a group without records has no row
      }
      Object[] values = new Object[group.getKey().size() + counts];
      for (int i = 0; i < group.getKey().size(); i++) {
        Object v = group.getKey().get(i);
        values[i] = v instanceof String ? UTF8String.fromString((String) v) : v;
      }
      for (int i = 0; i < counts; i++) {
        values[group.getKey().size() + i] = group.getValue();
      }
      out.add(new GenericInternalRow(values));
    }
    return out;
  }

  /** Reads the count: asks the partitions' leaders for their log starts, then answers. */
  static final class Reader implements PartitionReader<InternalRow> {
    private final List<InternalRow> rows;
    private int at = -1;

    Reader(CountPartition partition) {
      List<TopicPartition> tps = new ArrayList<>();
      for (OffsetRange range : partition.ranges) {
        tps.add(range.tp);
      }
      Map<TopicPartition, PartitionOffsets> now = tps.isEmpty() ? new LinkedHashMap<>()
          : Cluster.get().offsets(tps, tp -> null, partition.fetchTimeoutMs);
      if (!tps.isEmpty()) { // a tiered partition's log starts in the object store
        TieredSplit.lowerStarts(TieredSplit.plan(Cluster.get(), tps, null,
            RaylogOptions.READ_UNCOMMITTED, partition.fetchTimeoutMs), now);
      }
      rows = partition.rows(now);
    }

    @Override
    public boolean next() {
      return ++at < rows.size();
    }

    @Override
    public InternalRow get() {
      return rows.get(at);
    }

    @Override
    public void close() throws IOException {}
  }
}
