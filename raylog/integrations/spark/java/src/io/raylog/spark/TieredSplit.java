package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * Cuts planned ranges into cold pieces (offsets below a partition's local log start, one piece
 * per remote segment) and hot rests, and gives tiered partitions their whole log's start (a
 * broker answers its local log's). The plan comes from Python: the {@code tieredPlan} option
 * when raylog.integrations.spark.read planned it, else a cross-language task
 * (raylog.integrations.spark.cold.java_split) that asks the partitions' leaders for their
 * tiered views, before the bounds are resolved. A cold range has no preferred host: its reader's task reads the object store.
 * Every decision about the log (which offsets are remote, which transactions aborted) is made
 * in Python; this class only lays the pieces over the ranges.
 */
final class TieredSplit {
  private TieredSplit() {}

  /** How old the topics' metadata may be to say whether they are tiered. */
  static final long FRESH_METADATA_MS = 1_000;

  /**
   * The cold plan of {@code partitions}: the {@code tieredPlan} option if given, else the
   * answer of a java_split task (their whole cold parts). JSON {@code {"pieces": {topic:
   * {partition: [[start, end, piece], ...]}}, "log_starts": {topic: {partition: offset}}}}.
   */
  static JsonNode plan(Cluster cluster, Collection<TopicPartition> partitions,
      RaylogOptions options) {
    return plan(cluster, partitions, options.tieredPlan, options.isolation,
        options.fetchTimeoutMs);
  }

  static JsonNode plan(Cluster cluster, Collection<TopicPartition> partitions, String given,
      String isolation, long timeoutMs) {
    if (given != null) {
      return Cluster.json(given);
    }
    // Only a tiered topic has a cold part; the others' plan is empty without the task (a
    // Python worker, started by Ray if none is idle: most of a small query's time). Asked
    // afresh (remote storage may have been turned on since), unless the planner fetched it a
    // moment ago (it refreshes the topics it reads: Cluster.partitions).
    Set<String> names = new TreeSet<>();
    for (TopicPartition tp : partitions) {
      names.add(tp.topic);
    }
    List<Object[]> asked = tieredOnly(partitions,
        names.isEmpty() ? Map.of() : cluster.topics(names, FRESH_METADATA_MS));
    if (asked.isEmpty()) {
      return Cluster.json("{}");
    }
    Map<String, Object> request = new HashMap<>();
    request.put("partitions", asked);
    request.put("isolation", isolation);
    return Cluster.json(cluster.tieredPlan(Cluster.toJson(request), timeoutMs));
  }

  /**
   * The partitions a read from {@code from} may find below their local log start, where a
   * tiered partition's cold part is: those with no start yet (new to the stream: read from
   * their earliest), no offsets, or a start below the local log start their broker answered
   * ({@code offsets}, before {@link #lowerStarts}). The others read hot data alone.
   */
  static List<TopicPartition> behindLocalStart(Collection<TopicPartition> partitions,
      Map<TopicPartition, Long> from, Map<TopicPartition, PartitionOffsets> offsets) {
    List<TopicPartition> out = new ArrayList<>();
    for (TopicPartition tp : partitions) {
      Long start = from.get(tp);
      PartitionOffsets at = offsets.get(tp);
      if (start == null || at == null || start < at.logStart) {
        out.add(tp);
      }
    }
    return out;
  }

  /** The partitions whose topic is tiered (or not known here: asked for), as the planning
   * task takes them: [topic, partition] each. */
  static List<Object[]> tieredOnly(Collection<TopicPartition> partitions,
      Map<String, Cluster.TopicInfo> infos) {
    List<Object[]> out = new ArrayList<>();
    for (TopicPartition tp : partitions) {
      Cluster.TopicInfo info = infos.get(tp.topic);
      if (info == null || info.tiered) {
        out.add(new Object[] {tp.topic, tp.partition});
      }
    }
    return out;
  }

  /** A tiered partition's log starts in the object store, below the local log start its
   * broker answers: the plan's log starts replace the brokers' where lower. */
  static void lowerStarts(JsonNode plan, Map<TopicPartition, PartitionOffsets> offsets) {
    for (Map.Entry<TopicPartition, PartitionOffsets> e : offsets.entrySet()) {
      JsonNode start = plan.path("log_starts").path(e.getKey().topic)
          .path(Integer.toString(e.getKey().partition));
      PartitionOffsets o = e.getValue();
      if (start.isNumber() && start.asLong() < o.logStart) {
        e.setValue(new PartitionOffsets(start.asLong(), o.latest, o.timestampOffset,
            o.sizeBytes, o.lastStable));
      }
    }
  }

  /** The ranges with the plan's pieces (sorted by start) laid over them: cold where a piece
   * covers offsets, hot elsewhere. */
  static List<OffsetRange> lay(JsonNode plan, List<OffsetRange> ranges) {
    List<OffsetRange> out = new ArrayList<>();
    for (OffsetRange r : ranges) {
      JsonNode pieces = plan.path("pieces").path(r.tp.topic)
          .path(Integer.toString(r.tp.partition));
      long cursor = r.start;
      for (JsonNode piece : pieces) {
        long start = Math.max(piece.get(0).asLong(), cursor);
        long end = Math.min(piece.get(1).asLong(), r.end);
        if (start >= end) {
          continue;
        }
        if (start > cursor) {
          out.add(r.slice(cursor, start));
        }
        out.add(new OffsetRange(r.tp, start, end, new String[0], piece.get(2).asText()));
        cursor = end;
      }
      if (cursor < r.end || r.start == r.end) {
        out.add(r.slice(cursor, r.end));
      }
    }
    return out;
  }
}
