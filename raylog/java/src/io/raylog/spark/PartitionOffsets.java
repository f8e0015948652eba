package io.raylog.spark;

/** What a partition's leader says of its offsets: the log start, the latest offset (its high
 * watermark: the end of what consumers may read) and, when asked, the first offset at or after
 * a timestamp (null when no record is that recent). */
public final class PartitionOffsets {
  public final long logStart;
  public final long latest;
  public final Long timestampOffset;

  public PartitionOffsets(long logStart, long latest, Long timestampOffset) {
    this.logStart = logStart;
    this.latest = latest;
    this.timestampOffset = timestampOffset;
  }

  @Override
  public String toString() {
    return "[" + logStart + ", " + latest + ")";
  }
}
