package io.raylog.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** A Spark task's share of a read: one offset range of one partition, best run on a host
 * that holds an in-sync replica of it. */
public final class RangePartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  public final OffsetRange range;

  public RangePartition(OffsetRange range) {
    this.range = range;
  }

  @Override
  public String[] preferredLocations() {
    return range.hosts;
  }

  @Override
  public String toString() {
    return range.toString();
  }
}
