package io.raylog.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Function;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Offsets and ranges, as Spark's Kafka source plans them: bounds resolved against what each
 * partition holds, offsets no longer (or not yet) there handled as {@code failOnDataLoss}
 * says, ranges split for {@code maxRecordsPerPartition} and {@code minPartitions}, and a
 * trigger's ranges capped by {@code maxOffsetsPerTrigger}. No Spark or Ray here: plain logic.
 */
public final class RangePlanner {
  private static final Logger LOG = LoggerFactory.getLogger(RangePlanner.class);

  static final String DATA_LOSS_HINT = " Some data may have been lost: records were deleted "
      + "by retention, or the topic was deleted or recreated, or the offset was never written. "
      + "If you want your query to go on in such cases, set the source option "
      + "'failOnDataLoss' to 'false'.";

  private RangePlanner() {}

  /** Thrown for offsets that are not there when {@code failOnDataLoss} is true. */
  public static final class DataLossException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    public DataLossException(String message) {
      super(message + DATA_LOSS_HINT);
    }
  }

  /**
   * The offset {@code bound} names in each of {@code partitions}, from their {@code offsets}.
   * A bound of offsets or timestamps per partition must name exactly these partitions. With
   * no record at or after a starting timestamp: an error, or the latest offset if
   * {@code latestIfNoMatch}; for an ending timestamp, the latest offset.
   */
  public static SortedMap<TopicPartition, Long> resolve(
      Bound bound, boolean starting, Collection<TopicPartition> partitions,
      Map<TopicPartition, PartitionOffsets> offsets, boolean latestIfNoMatch) {
    String option = starting ? "startingOffsets" : "endingOffsets";
    if (bound.kind == Bound.Kind.OFFSETS || bound.kind == Bound.Kind.TIMESTAMPS) {
      Set<TopicPartition> named = bound.values.keySet();
      Set<TopicPartition> wanted = new TreeSet<>(partitions);
      if (!named.equals(wanted)) {
        Set<TopicPartition> missing = new TreeSet<>(wanted);
        missing.removeAll(named);
        Set<TopicPartition> unknown = new TreeSet<>(named);
        unknown.removeAll(wanted);
        String which = bound.kind == Bound.Kind.OFFSETS ? option : option + "ByTimestamp";
        throw new IllegalArgumentException(which + " must name every partition read, and no "
            + "other" + (bound.kind == Bound.Kind.OFFSETS
                ? " (use -2 for earliest and -1 for latest where you don't care)" : "")
            + ": missing " + missing + ", not read " + unknown);
      }
    }
    SortedMap<TopicPartition, Long> out = new TreeMap<>();
    for (TopicPartition tp : partitions) {
      PartitionOffsets po = offsets.get(tp);
      if (po == null) {
        throw new IllegalStateException("no offsets known for " + tp);
      }
      long offset;
      switch (bound.kind) {
        case EARLIEST:
          offset = po.logStart;
          break;
        case LATEST:
          offset = po.latest;
          break;
        case OFFSETS:
          long given = bound.values.get(tp);
          offset = given == OffsetsJson.EARLIEST ? po.logStart
              : given == OffsetsJson.LATEST ? po.latest : given;
          break;
        default: // a timestamp, or timestamps by partition
          if (po.timestampOffset != null) {
            offset = po.timestampOffset;
          } else if (!starting || latestIfNoMatch) {
            offset = po.latest;
          } else {
            throw new IllegalStateException("No offset of " + tp + " has a timestamp at or after "
                + bound.timestampFor(tp) + " (the " + option + "ByTimestamp bound). Set "
                + "'startingOffsetsByTimestampStrategy' to 'latest' to start at the latest "
                + "offset instead.");
          }
      }
      out.put(tp, offset);
    }
    return out;
  }

  /**
   * The ranges [start, end) to read: {@code starts} checked against what each partition holds
   * ({@code failOnDataLoss}: an error if a start is below the log start or beyond the latest
   * offset; otherwise the nearest offset that is there), ends likewise; empty ranges dropped.
   */
  public static List<OffsetRange> ranges(
      Map<TopicPartition, Long> starts, Map<TopicPartition, Long> ends,
      Map<TopicPartition, PartitionOffsets> offsets, boolean failOnDataLoss,
      Function<TopicPartition, String[]> hosts) {
    List<OffsetRange> out = new ArrayList<>();
    for (Map.Entry<TopicPartition, Long> e : new TreeMap<>(ends).entrySet()) {
      TopicPartition tp = e.getKey();
      PartitionOffsets po = offsets.get(tp);
      Long planned = starts.get(tp);
      if (planned != null && planned.equals(e.getValue())) {
        continue; // nothing to read: where the offset stands does not matter
      }
      long start = checked(tp, planned == null ? po.logStart : planned, po, failOnDataLoss,
          "starting");
      long end = checked(tp, e.getValue(), po, failOnDataLoss, "ending");
      if (end < start) {
        if (failOnDataLoss) {
          throw new IllegalArgumentException("The ending offset " + end + " of " + tp
              + " is before its starting offset " + start);
        }
        LOG.warn("{}: ending offset {} is before starting offset {}: nothing read", tp, end,
            start);
        end = start;
      }
      if (end > start) {
        out.add(new OffsetRange(tp, start, end, hosts.apply(tp)));
      }
    }
    return out;
  }

  /** {@code offset} if {@code po} holds it (or it is the next to write); otherwise a
   * DataLossException, or with {@code failOnDataLoss} false the nearest offset held. */
  static long checked(TopicPartition tp, long offset, PartitionOffsets po,
      boolean failOnDataLoss, String which) {
    if (offset >= po.logStart && offset <= po.latest) {
      return offset;
    }
    String what = "The " + which + " offset " + offset + " of " + tp + " is "
        + (offset < po.logStart ? "below" : "beyond") + " the offsets it holds now, "
        + po + ".";
    if (failOnDataLoss) {
      throw new DataLossException(what);
    }
    long nearest = offset < po.logStart ? po.logStart : po.latest;
    LOG.warn("{} Reading from {} instead (failOnDataLoss is false).", what, nearest);
    return nearest;
  }

  /**
   * Ranges cut for Spark tasks: ranges above {@code maxRecordsPerPartition} records into
   * equal pieces no larger; then, while there are fewer than {@code minPartitions}, each
   * range into pieces in proportion to its share of all records (at least one each).
   */
  public static List<OffsetRange> split(
      List<OffsetRange> ranges, Integer minPartitions, Long maxRecordsPerPartition) {
    List<OffsetRange> out = new ArrayList<>();
    for (OffsetRange range : ranges) {
      if (range.size() == 0) {
        continue;
      }
      long parts = maxRecordsPerPartition == null ? 1 // (no overflow near Long.MAX_VALUE)
          : range.size() / maxRecordsPerPartition
              + (range.size() % maxRecordsPerPartition == 0 ? 0 : 1);
      out.addAll(pieces(range, parts));
    }
    if (minPartitions == null || out.size() >= minPartitions) {
      return out;
    }
    long total = 0;
    for (OffsetRange range : out) {
      total += range.size();
    }
    List<OffsetRange> finer = new ArrayList<>();
    for (OffsetRange range : out) {
      long parts = Math.max(Math.round((double) range.size() / total * minPartitions), 1L);
      finer.addAll(pieces(range, Math.min(parts, range.size())));
    }
    return finer;
  }

  private static List<OffsetRange> pieces(OffsetRange range, long parts) {
    List<OffsetRange> out = new ArrayList<>();
    long remaining = range.size();
    long at = range.start;
    for (long part = 0; part < parts; part++) {
      long size = remaining / (parts - part); // the last pieces take the remainder
      remaining -= size;
      if (size > 0) {
        out.add(range.slice(at, at + size));
      }
      at += size;
    }
    return out;
  }

  /**
   * The ends of a trigger reading at most {@code limit} records from {@code from} towards
   * {@code until}: each partition's share in proportion to what it has waiting (a partition
   * with anything waiting gets at least one record), as Spark's Kafka source does.
   */
  public static SortedMap<TopicPartition, Long> rateLimit(
      Map<TopicPartition, Long> from, Map<TopicPartition, Long> until, long limit) {
    SortedMap<TopicPartition, Long> out = new TreeMap<>(until);
    long total = 0;
    for (Map.Entry<TopicPartition, Long> e : until.entrySet()) {
      total += Math.max(0, e.getValue() - from.getOrDefault(e.getKey(), e.getValue()));
    }
    if (total <= limit) {
      return out;
    }
    for (Map.Entry<TopicPartition, Long> e : until.entrySet()) {
      Long begin = from.get(e.getKey());
      if (begin == null || e.getValue() <= begin) {
        continue;
      }
      double share = limit * ((double) (e.getValue() - begin) / total);
      long records = (long) (share < 1 ? Math.ceil(share) : Math.floor(share));
      out.put(e.getKey(), Math.min(e.getValue(), begin + records));
    }
    return out;
  }

  /**
   * Ranges packed into Spark tasks as Spark packs file splits: the largest first, each task
   * filled up to {@code maxTaskBytes} of stored bytes where {@code bytesPerRecord} tells, and
   * ranges only with ranges preferring the same hosts (a range larger than that is a task of
   * its own). Every Spark task has a fixed cost, which small ranges would not repay;
   * {@code maxTaskBytes} at most the total over the parallelism keeps every core busy.
   */
  public static List<List<OffsetRange>> pack(List<OffsetRange> ranges,
      Function<TopicPartition, Double> bytesPerRecord, long maxTaskBytes) {
    List<OffsetRange> bySize = new ArrayList<>(ranges);
    bySize.sort((a, b) -> Double.compare(bytes(b, bytesPerRecord), bytes(a, bytesPerRecord)));
    List<List<OffsetRange>> tasks = new ArrayList<>();
    Map<String, List<OffsetRange>> open = new TreeMap<>(); // the task being filled, by hosts
    Map<String, Double> openBytes = new TreeMap<>();
    for (OffsetRange range : bySize) {
      String hosts = String.join(",", new TreeSet<>(Arrays.asList(range.hosts)));
      double size = bytes(range, bytesPerRecord);
      List<OffsetRange> task = open.get(hosts);
      if (task == null || openBytes.get(hosts) + size > maxTaskBytes) {
        task = new ArrayList<>();
        tasks.add(task);
        open.put(hosts, task);
        openBytes.put(hosts, 0.0);
      }
      task.add(range);
      openBytes.put(hosts, openBytes.get(hosts) + size);
    }
    Comparator<OffsetRange> order = (a, b) -> a.tp.equals(b.tp)
        ? Long.compare(a.start, b.start) : a.tp.compareTo(b.tp);
    for (List<OffsetRange> task : tasks) { // read in partition and offset order
      task.sort(order);
    }
    tasks.sort((a, b) -> order.compare(a.get(0), b.get(0)));
    return tasks;
  }

  private static double bytes(OffsetRange range, Function<TopicPartition, Double> perRecord) {
    return range.size() * perRecord.apply(range.tp);
  }
}
