package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;

/**
 * Cuts planned ranges into cold pieces (offsets below a partition's local log start, one piece
 * per remote segment) and hot rests. The pieces come from Python: the {@code tieredPlan} option
 * when raylog.integrations.spark.read planned them, else a cross-language task
 * (raylog.integrations.spark.cold.java_split) that asks the partitions' leaders for their
 * tiered views. A cold range has no preferred host: its reader's task reads the object store.
 * Every decision about the log (which offsets are remote, which transactions aborted) is made
 * in Python; this class only lays the pieces over the ranges.
 */
final class TieredSplit {
  private TieredSplit() {}

  static List<OffsetRange> apply(Cluster cluster, List<OffsetRange> ranges,
      RaylogOptions options) {
    if (ranges.isEmpty()) {
      return ranges;
    }
    String plan = options.tieredPlan;
    if (plan == null) {
      List<Object[]> asked = new ArrayList<>();
      for (OffsetRange r : ranges) {
        asked.add(new Object[] {r.tp.topic, r.tp.partition, r.start, r.end});
      }
      java.util.Map<String, Object> request = new java.util.HashMap<>();
      request.put("ranges", asked);
      request.put("isolation", options.isolation);
      plan = cluster.tieredPlan(Cluster.toJson(request), options.fetchTimeoutMs);
    }
    return lay(Cluster.json(plan), ranges);
  }

  /** The ranges with the plan's pieces ({@code {topic: {partition: [[start, end, piece]]}}},
   * sorted by start) laid over them: cold where a piece covers offsets, hot elsewhere. */
  static List<OffsetRange> lay(JsonNode plan, List<OffsetRange> ranges) {
    List<OffsetRange> out = new ArrayList<>();
    for (OffsetRange r : ranges) {
      JsonNode pieces = plan.path(r.tp.topic).path(Integer.toString(r.tp.partition));
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
