package io.raylog.spark;

/** What a partition's leader says of its offsets: the log start, the latest offset (its high
 * watermark: the end of what consumers may read) and, when asked, the first offset at or after
 * a timestamp (null when no record is that recent). */
public final class PartitionOffsets {
  public final long logStart;
  public final long latest;
  public final Long timestampOffset;
  public final long sizeBytes; // of the log on disk, -1 if unknown: sizes a read's tasks
  /** Below it every transaction is decided: the end of a read_committed read. */
  public final long lastStable;

  public PartitionOffsets(long logStart, long latest, Long timestampOffset) {
    this(logStart, latest, timestampOffset, -1);
  }

  public PartitionOffsets(long logStart, long latest, Long timestampOffset, long sizeBytes) {
    this(logStart, latest, timestampOffset, sizeBytes, latest);
  }

  public PartitionOffsets(long logStart, long latest, Long timestampOffset, long sizeBytes,
      long lastStable) {
    this.logStart = logStart;
    this.latest = latest;
    this.timestampOffset = timestampOffset;
    this.sizeBytes = sizeBytes;
    this.lastStable = lastStable;
  }

  /** These offsets as a read_committed consumer sees them: the latest offset is the last
   * stable offset (as Kafka's ListOffsets answers such a consumer). */
  public PartitionOffsets committed() {
    return new PartitionOffsets(logStart, lastStable, timestampOffset, sizeBytes, lastStable);
  }

  /** The stored bytes per record, from the log's size (1 if unknown or empty). */
  public double bytesPerRecord() {
    return sizeBytes <= 0 || latest <= logStart ? 1 : (double) sizeBytes / (latest - logStart);
  }

  @Override
  public String toString() {
    return "[" + logStart + ", " + latest + ")";
  }
}
