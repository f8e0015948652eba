package io.raylog.spark;

import static io.raylog.spark.Check.assertEquals;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** A plan's cold pieces laid over planned ranges: cold where a piece covers, hot elsewhere. */
public final class TieredSplitTest {
  private TieredSplitTest() {}

  private static final TopicPartition T0 = new TopicPartition("t", 0);
  private static final TopicPartition T1 = new TopicPartition("t", 1);

  private static String show(List<OffsetRange> ranges) {
    StringBuilder out = new StringBuilder();
    for (OffsetRange r : ranges) {
      out.append(r.tp).append('[').append(r.start).append(',').append(r.end).append(')')
          .append(r.cold == null ? " hot" + Arrays.toString(r.hosts) : " " + r.cold)
          .append("; ");
    }
    return out.toString();
  }

  public static void testPiecesAreLaidOverTheRanges() {
    String plan = "{\"pieces\": {\"t\": {\"0\": [[0, 100, \"s0\"], [100, 200, \"s1\"]]}}}";
    List<OffsetRange> ranges = Arrays.asList(
        new OffsetRange(T0, 50, 260, new String[] {"h"}),
        new OffsetRange(T1, 0, 10, new String[] {"h1"}));
    assertEquals("t-0[50,100) s0; t-0[100,200) s1; t-0[200,260) hot[h]; t-1[0,10) hot[h1]; ",
        show(TieredSplit.lay(Cluster.json(plan), ranges)));
  }

  public static void testARangeInsideOnePieceIsColdAlone() {
    String plan = "{\"pieces\": {\"t\": {\"0\": [[0, 100, \"s0\"]]}}}";
    List<OffsetRange> ranges = Arrays.asList(new OffsetRange(T0, 10, 20, new String[] {"h"}),
        new OffsetRange(T1, 5, 5, new String[] {"h1"}));
    assertEquals("t-0[10,20) s0; t-1[5,5) hot[h1]; ",
        show(TieredSplit.lay(Cluster.json(plan), ranges)));
  }

  public static void testAnEmptyPlanLeavesEveryRangeHot() {
    List<OffsetRange> ranges = Arrays.asList(new OffsetRange(T0, 10, 20, new String[] {"h"}));
    assertEquals("t-0[10,20) hot[h]; ", show(TieredSplit.lay(Cluster.json("{}"), ranges)));
  }

  public static void testTieredPartitionsStartWhereThePlanSays() {
    java.util.Map<TopicPartition, PartitionOffsets> offsets = new java.util.TreeMap<>();
    offsets.put(T0, new PartitionOffsets(500, 600, null, 10, 590));
    offsets.put(T1, new PartitionOffsets(0, 50, null));
    TieredSplit.lowerStarts(Cluster.json(
        "{\"log_starts\": {\"t\": {\"0\": 0, \"1\": 7}}}"), offsets);
    assertEquals(0L, offsets.get(T0).logStart);
    assertEquals(600L, offsets.get(T0).latest);
    assertEquals(590L, offsets.get(T0).lastStable);
    assertEquals(0L, offsets.get(T1).logStart); // never raised
  }

  public static void testSlicesOfAColdRangeStayCold() {
    OffsetRange cold = new OffsetRange(T0, 0, 100, new String[0], "s0");
    assertEquals("s0", cold.slice(10, 20).cold);
  }

  private static Cluster.TopicInfo info(String name, boolean tiered) {
    return new Cluster.TopicInfo(name, false, tiered, new ArrayList<>(), new HashMap<>(), 0);
  }

  /** Only tiered topics' partitions go to the planning task (a Python worker each query);
   * a topic the metadata does not describe is asked for, as before. */
  public static void testOnlyTieredTopicsAreAskedForTheirColdPart() {
    Map<String, Cluster.TopicInfo> infos = new HashMap<>();
    infos.put("hot", info("hot", false));
    infos.put("cold", info("cold", true));
    List<TopicPartition> partitions = Arrays.asList(new TopicPartition("hot", 0),
        new TopicPartition("cold", 1), new TopicPartition("unknown", 2),
        new TopicPartition("hot", 3));
    StringBuilder asked = new StringBuilder();
    for (Object[] tp : TieredSplit.tieredOnly(partitions, infos)) {
      asked.append(tp[0]).append('-').append(tp[1]).append(' ');
    }
    assertEquals("cold-1 unknown-2 ", asked.toString());
    assertEquals(0, TieredSplit.tieredOnly(Arrays.asList(new TopicPartition("hot", 0)),
        infos).size());
  }

  /** A stream's batch plans the cold part only of the partitions it reads from below their
   * local log start, or that are new to it (no start); one keeping up plans nothing. */
  public static void testOnlyPartitionsReadFromBelowTheLocalStartArePlanned() {
    TopicPartition t2 = new TopicPartition("t", 2);
    TopicPartition t3 = new TopicPartition("t", 3);
    Map<TopicPartition, Long> from = new HashMap<>();
    from.put(T0, 99L);   // below its local start 100: cold offsets to read
    from.put(T1, 100L);  // at its local start: hot alone
    from.put(t2, 500L);  // far past it
    Map<TopicPartition, PartitionOffsets> offsets = new HashMap<>();
    offsets.put(T0, new PartitionOffsets(100, 1000, null));
    offsets.put(T1, new PartitionOffsets(100, 1000, null));
    offsets.put(t2, new PartitionOffsets(100, 1000, null));
    offsets.put(t3, new PartitionOffsets(100, 1000, null));  // new: no start yet
    assertEquals(Arrays.asList(T0, t3).toString(),
        TieredSplit.behindLocalStart(Arrays.asList(T0, T1, t2, t3), from, offsets).toString());
    from.put(T0, 100L);
    from.put(t3, 100L);
    assertEquals(0,
        TieredSplit.behindLocalStart(Arrays.asList(T0, T1, t2, t3), from, offsets).size());
  }
}
