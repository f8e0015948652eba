package io.raylog.spark;

import java.io.Serializable;

/** Offsets [start, end) of one partition, and the hosts of the replicas that hold it; or, for
 * a cold range (below the partition's local log start), the remote segment piece holding it,
 * read from the object store without a broker ({@link TieredSplit}). */
public final class OffsetRange implements Serializable {
  private static final long serialVersionUID = 1L;

  public final TopicPartition tp;
  public final long start;
  public final long end;
  public final String[] hosts;
  /** A cold range's piece (JSON made by raylog.integrations.spark.cold), else null. */
  public final String cold;

  public OffsetRange(TopicPartition tp, long start, long end, String[] hosts) {
    this(tp, start, end, hosts, null);
  }

  public OffsetRange(TopicPartition tp, long start, long end, String[] hosts, String cold) {
    if (end < start) {
      throw new IllegalArgumentException("range of " + tp + " ends (" + end + ") before it "
          + "starts (" + start + ")");
    }
    this.tp = tp;
    this.start = start;
    this.end = end;
    this.hosts = hosts == null ? new String[0] : hosts;
    this.cold = cold;
  }

  public long size() {
    return end - start;
  }

  OffsetRange slice(long from, long until) {
    return new OffsetRange(tp, from, until, hosts, cold);
  }

  @Override
  public String toString() {
    return tp + "[" + start + ", " + end + ")" + (cold == null ? "" : " cold");
  }
}
