package io.raylog.spark;

import java.io.Serializable;

/** Offsets [start, end) of one partition, and the hosts of the replicas that hold it. */
public final class OffsetRange implements Serializable {
  private static final long serialVersionUID = 1L;

  public final TopicPartition tp;
  public final long start;
  public final long end;
  public final String[] hosts;

  public OffsetRange(TopicPartition tp, long start, long end, String[] hosts) {
    if (end < start) {
      throw new IllegalArgumentException("range of " + tp + " ends (" + end + ") before it "
          + "starts (" + start + ")");
    }
    this.tp = tp;
    this.start = start;
    this.end = end;
    this.hosts = hosts == null ? new String[0] : hosts;
  }

  public long size() {
    return end - start;
  }

  OffsetRange slice(long from, long until) {
    return new OffsetRange(tp, from, until, hosts);
  }

  @Override
  public String toString() {
    return tp + "[" + start + ", " + end + ")";
  }
}
