package io.raylog.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Plans a read: the options checked, the columns the query needs (only they are shipped),
 * and counts answered from offsets. A count is pushed down when it is COUNT(*) or COUNT of a
 * column never null, grouped by nothing, {@code topic} and/or {@code partition}, over topics
 * that are not compacted (a compacted topic's offsets have gaps: those are scanned).
 */
final class RaylogScanBuilder
    implements SupportsPushDownRequiredColumns, SupportsPushDownAggregates {
  private final CaseInsensitiveStringMap options;
  private StructType schema;
  private CountPlan count;

  RaylogScanBuilder(CaseInsensitiveStringMap options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  @Override
  public void pruneColumns(StructType required) {
    List<StructField> kept = new ArrayList<>();
    for (StructField field : schema.fields()) {
      if (required.getFieldIndex(field.name()).isDefined()) {
        kept.add(field);
      }
    }
    schema = new StructType(kept.toArray(new StructField[0]));
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    return countPlan(aggregation) != null; // one task answers every group
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    count = countPlan(aggregation);
    return count != null;
  }

  /** The pushed count for {@code aggregation}, or null if it cannot be answered so. */
  private CountPlan countPlan(Aggregation aggregation) {
    if (RaylogOptions.forBatch(options).readCommitted()) {
      return null; // aborted transactions' records hold offsets: the records are counted
    }
    for (AggregateFunc f : aggregation.aggregateExpressions()) {
      boolean countsRows = f instanceof CountStar || (f instanceof Count
          && !((Count) f).isDistinct() && KafkaSchema.neverNull(columnOf(((Count) f).column())));
      if (!countsRows) {
        return null;
      }
    }
    List<String> groups = new ArrayList<>();
    for (Expression e : aggregation.groupByExpressions()) {
      String column = columnOf(e);
      if (!"topic".equals(column) && !"partition".equals(column) || groups.contains(column)) {
        return null;
      }
      groups.add(column);
    }
    for (Cluster.TopicInfo info : Cluster.get().topics(topicsRead(), false).values()) {
      if (info.compacted) {
        return null;
      }
    }
    return new CountPlan(groups, aggregation.aggregateExpressions().length);
  }

  private List<String> topicsRead() {
    List<String> names = new ArrayList<>();
    for (TopicPartition tp : Cluster.get().partitions(RaylogOptions.forBatch(options))) {
      if (!names.contains(tp.topic)) {
        names.add(tp.topic);
      }
    }
    return names;
  }

  private static String columnOf(Expression e) {
    if (e instanceof NamedReference && ((NamedReference) e).fieldNames().length == 1) {
      return ((NamedReference) e).fieldNames()[0];
    }
    return null;
  }

  @Override
  public Scan build() {
    return new RaylogScan(options, count == null ? schema : count.schema(), count);
  }

  /** A count answered from offsets: its group-by columns, in order, and how many counts. */
  static final class CountPlan {
    final List<String> groups;
    final int counts;

    CountPlan(List<String> groups, int counts) {
      this.groups = groups;
      this.counts = counts;
    }

    StructType schema() {
      StructType out = new StructType();
      for (String group : groups) {
        out = out.add(group, KafkaSchema.typeOf(group), true);
      }
      for (int i = 0; i < counts; i++) {
        out = out.add("count" + i, DataTypes.LongType, false);
      }
      return out;
    }

    CountPartition partition(List<OffsetRange> ranges, RaylogOptions options) {
      boolean byTopic = groups.contains("topic");
      boolean byPartition = groups.contains("partition");
      boolean topicFirst = !byPartition || groups.indexOf("topic") == 0;
      return new CountPartition(ranges, byTopic, byPartition, topicFirst, counts,
          options.failOnDataLoss, options.fetchTimeoutMs);
    }
  }
}
