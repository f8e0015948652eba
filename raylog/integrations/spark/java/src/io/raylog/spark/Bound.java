package io.raylog.spark;

import java.io.Serializable;
import java.util.Collections;
import java.util.SortedMap;

/**
 * Where a read starts or ends, as an option gives it: the earliest or latest offset, offsets
 * per partition ({@code -2} earliest, {@code -1} latest), a timestamp per partition, or one
 * timestamp for all partitions. Resolved to numbers against the partitions' offsets by
 * {@link RangePlanner}.
 */
public final class Bound implements Serializable {
  private static final long serialVersionUID = 1L;

  public enum Kind { EARLIEST, LATEST, OFFSETS, TIMESTAMPS, TIMESTAMP }

  public final Kind kind;
  public final SortedMap<TopicPartition, Long> values;
  public final long timestamp;

  private Bound(Kind kind, SortedMap<TopicPartition, Long> values, long timestamp) {
    this.kind = kind;
    this.values = values == null ? Collections.emptySortedMap() : values;
    this.timestamp = timestamp;
  }

  public static final Bound EARLIEST = new Bound(Kind.EARLIEST, null, 0);
  public static final Bound LATEST = new Bound(Kind.LATEST, null, 0);

  public static Bound offsets(SortedMap<TopicPartition, Long> offsets) {
    return new Bound(Kind.OFFSETS, offsets, 0);
  }

  public static Bound timestamps(SortedMap<TopicPartition, Long> timestamps) {
    return new Bound(Kind.TIMESTAMPS, timestamps, 0);
  }

  public static Bound timestamp(long timestamp) {
    return new Bound(Kind.TIMESTAMP, null, timestamp);
  }

  /** Whether resolving this bound needs a timestamp lookup for partition {@code tp}. */
  public Long timestampFor(TopicPartition tp) {
    switch (kind) {
      case TIMESTAMP:
        return timestamp;
      case TIMESTAMPS:
        return values.get(tp);
      default:
        return null;
    }
  }

  @Override
  public String toString() {
    switch (kind) {
      case OFFSETS:
        return OffsetsJson.format(values);
      case TIMESTAMPS:
        return "timestamps " + OffsetsJson.format(values);
      case TIMESTAMP:
        return "timestamp " + timestamp;
      default:
        return kind.name().toLowerCase();
    }
  }
}
