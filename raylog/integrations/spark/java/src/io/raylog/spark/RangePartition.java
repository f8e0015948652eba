package io.raylog.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** A Spark task's share of a read: offset ranges read one after the other, best run on a
 * host that holds in-sync replicas of them (ranges are packed only with ranges of the same
 * hosts). */
public final class RangePartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  public final List<OffsetRange> ranges;

  public RangePartition(List<OffsetRange> ranges) {
    this.ranges = new ArrayList<>(ranges);
  }

  @Override
  public String[] preferredLocations() {
    return ranges.isEmpty() ? new String[0] : ranges.get(0).hosts;
  }

  @Override
  public String toString() {
    return ranges.toString();
  }
}
