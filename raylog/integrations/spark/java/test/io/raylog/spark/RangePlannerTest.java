package io.raylog.spark;

import static io.raylog.spark.Check.assertContains;
import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertThrows;
import static io.raylog.spark.Check.assertTrue;
import static io.raylog.spark.Check.fail;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.function.Function;

/** Offsets resolved, checked, split and rate limited as Spark's Kafka source does. */
public final class RangePlannerTest {
  private RangePlannerTest() {}

  private static final TopicPartition T0 = new TopicPartition("t", 0);
  private static final TopicPartition T1 = new TopicPartition("t", 1);
  private static final TopicPartition U0 = new TopicPartition("u", 0);
  private static final Function<TopicPartition, String[]> HOSTS =
      tp -> new String[] {"host-" + tp};

  /** A map from alternating keys and values. */
  @SuppressWarnings("unchecked")
  static <K, V> SortedMap<K, V> map(Object... keysAndValues) {
    SortedMap<K, V> out = new TreeMap<>();
    for (int i = 0; i < keysAndValues.length; i += 2) {
      out.put((K) keysAndValues[i], (V) keysAndValues[i + 1]);
    }
    return out;
  }

  private static PartitionOffsets po(long logStart, long latest) {
    return new PartitionOffsets(logStart, latest, null);
  }

  private static PartitionOffsets po(long logStart, long latest, Long timestampOffset) {
    return new PartitionOffsets(logStart, latest, timestampOffset);
  }

  /** t-0 holds [5, 10), t-1 holds [0, 3). */
  private static Map<TopicPartition, PartitionOffsets> held() {
    return map(T0, po(5, 10), T1, po(0, 3));
  }

  private static SortedMap<TopicPartition, Long> resolve(Bound bound, boolean starting,
      Map<TopicPartition, PartitionOffsets> offsets, boolean latestIfNoMatch) {
    return RangePlanner.resolve(bound, starting, new ArrayList<>(offsets.keySet()), offsets,
        latestIfNoMatch);
  }

  private static String show(List<OffsetRange> ranges) {
    return ranges.toString();
  }

  // resolve

  public static void testResolveEarliestAndLatest() {
    assertEquals(map(T0, 5L, T1, 0L), resolve(Bound.EARLIEST, true, held(), false));
    assertEquals(map(T0, 10L, T1, 3L), resolve(Bound.LATEST, true, held(), false));
    assertEquals(map(T0, 10L, T1, 3L), resolve(Bound.LATEST, false, held(), false));
  }

  public static void testResolveOffsetsWithMinus2AndMinus1() {
    assertEquals(map(T0, 7L, T1, 0L),
        resolve(Bound.offsets(map(T0, 7L, T1, -2L)), true, held(), false));
    assertEquals(map(T0, 10L, T1, 2L),
        resolve(Bound.offsets(map(T0, -1L, T1, 2L)), false, held(), false));
    // Offsets given are not checked here: that is ranges()'s business (failOnDataLoss).
    assertEquals(map(T0, 1L, T1, 99L),
        resolve(Bound.offsets(map(T0, 1L, T1, 99L)), true, held(), false));
  }

  public static void testResolveOffsetsMustNameExactlyThePartitionsRead() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> resolve(Bound.offsets(map(T0, 7L)), true, held(), false),
        "startingOffsets must name every partition read, and no other");
    assertContains(e.getMessage(), "use -2 for earliest and -1 for latest");
    assertContains(e.getMessage(), "missing [t-1], not read []");
    e = assertThrows(IllegalArgumentException.class,
        () -> resolve(Bound.offsets(map(T0, 7L, T1, 1L, U0, 3L)), false, held(), false),
        "endingOffsets must name every partition read");
    assertContains(e.getMessage(), "missing [], not read [u-0]");
    e = assertThrows(IllegalArgumentException.class,
        () -> resolve(Bound.timestamps(map(T0, 7L, U0, 3L)), true, held(), false),
        "startingOffsetsByTimestamp must name every partition read, and no other: "
            + "missing [t-1], not read [u-0]");
    assertThrows(IllegalArgumentException.class,
        () -> resolve(Bound.timestamps(map(T0, 7L)), false, held(), true),
        "endingOffsetsByTimestamp must name every partition read");
  }

  public static void testResolveGlobalTimestampNeedsNoPartitionList() {
    Map<TopicPartition, PartitionOffsets> offsets = map(T0, po(5, 10, 8L), T1, po(0, 3, 1L));
    assertEquals(map(T0, 8L, T1, 1L), resolve(Bound.timestamp(100), true, offsets, false));
    assertEquals(map(T0, 8L, T1, 1L), resolve(Bound.timestamp(100), false, offsets, false));
  }

  public static void testResolveTimestampsByPartition() {
    Map<TopicPartition, PartitionOffsets> offsets = map(T0, po(5, 10, 6L), T1, po(0, 3, 0L));
    assertEquals(map(T0, 6L, T1, 0L),
        resolve(Bound.timestamps(map(T0, 100L, T1, 50L)), true, offsets, false));
  }

  public static void testResolveStartingTimestampWithoutMatchIsAnErrorByDefault() {
    Map<TopicPartition, PartitionOffsets> offsets = map(T0, po(5, 10, 8L), T1, po(0, 3, null));
    IllegalStateException e = assertThrows(IllegalStateException.class,
        () -> resolve(Bound.timestamp(1000), true, offsets, false),
        "No offset of t-1 has a timestamp at or after 1000");
    assertContains(e.getMessage(),
        "Set 'startingOffsetsByTimestampStrategy' to 'latest' to start at the latest offset");
    assertThrows(IllegalStateException.class,
        () -> resolve(Bound.timestamps(map(T0, 1L, T1, 2000L)), true, offsets, false),
        "No offset of t-1 has a timestamp at or after 2000");
  }

  public static void testResolveStartingTimestampWithoutMatchLatestStrategy() {
    Map<TopicPartition, PartitionOffsets> offsets = map(T0, po(5, 10, 8L), T1, po(0, 3, null));
    assertEquals(map(T0, 8L, T1, 3L), resolve(Bound.timestamp(1000), true, offsets, true));
    assertEquals(map(T0, 8L, T1, 3L),
        resolve(Bound.timestamps(map(T0, 1L, T1, 2000L)), true, offsets, true));
  }

  public static void testResolveEndingTimestampWithoutMatchIsLatest() {
    // Spark: "If Kafka doesn't return the matched offset, the offset will be set to latest",
    // whatever the starting strategy.
    Map<TopicPartition, PartitionOffsets> offsets = map(T0, po(5, 10, null), T1, po(0, 3, 2L));
    for (boolean strategy : new boolean[] {false, true}) {
      assertEquals(map(T0, 10L, T1, 2L), resolve(Bound.timestamp(7), false, offsets, strategy));
      assertEquals(map(T0, 10L, T1, 2L),
          resolve(Bound.timestamps(map(T0, 7L, T1, 7L)), false, offsets, strategy));
    }
  }

  public static void testResolveWithoutOffsetsOfAPartitionFails() {
    assertThrows(IllegalStateException.class, () -> RangePlanner.resolve(Bound.EARLIEST, true,
        Arrays.asList(T0, U0), held(), false), "no offsets known for u-0");
  }

  // ranges

  public static void testRanges() {
    List<OffsetRange> got = RangePlanner.ranges(map(T1, 0L, T0, 6L), map(T0, 10L, T1, 3L),
        held(), true, HOSTS);
    assertEquals("[t-0[6, 10), t-1[0, 3)]", show(got));
    assertEquals(Collections.singletonList("host-t-0"), Arrays.asList(got.get(0).hosts));
    assertEquals(4L, got.get(0).size());
  }

  public static void testRangesWholeLogAndLatestIsReadable() {
    // The log start and the latest offset (the next to write) are both valid offsets.
    assertEquals("[t-0[5, 10)]", show(RangePlanner.ranges(map(T0, 5L), map(T0, 10L),
        held(), true, HOSTS)));
  }

  public static void testRangesWithoutStartReadFromLogStart() {
    assertEquals("[t-0[5, 10), t-1[1, 3)]", show(RangePlanner.ranges(map(T1, 1L),
        map(T0, 10L, T1, 3L), held(), true, HOSTS)));
  }

  public static void testEmptyRangesDropped() {
    assertEquals("[t-1[0, 3)]", show(RangePlanner.ranges(map(T0, 7L, T1, 0L),
        map(T0, 7L, T1, 3L), held(), true, HOSTS)));
    // Nothing to read: where the offset stands (even deleted) does not matter.
    assertEquals("[]", show(RangePlanner.ranges(map(T0, 2L), map(T0, 2L), held(), true,
        HOSTS)));
    assertEquals("[]", show(RangePlanner.ranges(map(T0, 50L), map(T0, 50L), held(), true,
        HOSTS)));
  }

  public static void testStartBelowLogStartIsDataLoss() {
    RangePlanner.DataLossException e = assertThrows(RangePlanner.DataLossException.class,
        () -> RangePlanner.ranges(map(T0, 2L), map(T0, 8L), held(), true, HOSTS),
        "The starting offset 2 of t-0 is below the offsets it holds now, [5, 10).");
    assertTrue(e.getMessage().endsWith(RangePlanner.DATA_LOSS_HINT), e.getMessage());
    assertContains(e.getMessage(), "set the source option 'failOnDataLoss' to 'false'");
    assertTrue(e instanceof IllegalStateException, "a DataLossException is an "
        + "IllegalStateException");
  }

  public static void testStartBeyondLatestIsDataLoss() {
    RangePlanner.DataLossException e = assertThrows(RangePlanner.DataLossException.class,
        () -> RangePlanner.ranges(map(T0, 12L), map(T0, 10L), held(), true, HOSTS),
        "The starting offset 12 of t-0 is beyond the offsets it holds now, [5, 10).");
    assertTrue(e.getMessage().endsWith(RangePlanner.DATA_LOSS_HINT), e.getMessage());
  }

  public static void testEndBeyondLatestIsDataLoss() {
    assertThrows(RangePlanner.DataLossException.class,
        () -> RangePlanner.ranges(map(T0, 6L), map(T0, 15L), held(), true, HOSTS),
        "The ending offset 15 of t-0 is beyond the offsets it holds now, [5, 10)."
            + RangePlanner.DATA_LOSS_HINT);
    assertThrows(RangePlanner.DataLossException.class,
        () -> RangePlanner.ranges(map(T0, 0L), map(T0, 3L), map(T0, po(5, 10)), true, HOSTS),
        "The starting offset 0 of t-0 is below");
  }

  public static void testWithoutFailOnDataLossOffsetsAreClamped() {
    assertEquals("[t-0[5, 8)]", show(RangePlanner.ranges(map(T0, 2L), map(T0, 8L), held(),
        false, HOSTS)));
    assertEquals("[t-0[6, 10)]", show(RangePlanner.ranges(map(T0, 6L), map(T0, 15L), held(),
        false, HOSTS)));
    assertEquals("[t-0[5, 10)]", show(RangePlanner.ranges(map(T0, 0L), map(T0, 99L), held(),
        false, HOSTS)));
    // Entirely beyond, or entirely deleted: nothing left to read.
    assertEquals("[]", show(RangePlanner.ranges(map(T0, 12L), map(T0, 15L), held(), false,
        HOSTS)));
    assertEquals("[]", show(RangePlanner.ranges(map(T0, 0L), map(T0, 3L), held(), false,
        HOSTS)));
  }

  public static void testEndBeforeStart() {
    assertThrows(IllegalArgumentException.class,
        () -> RangePlanner.ranges(map(T0, 8L), map(T0, 6L), held(), true, HOSTS),
        "The ending offset 6 of t-0 is before its starting offset 8");
    assertEquals("[]", show(RangePlanner.ranges(map(T0, 8L), map(T0, 6L), held(), false,
        HOSTS)));
  }

  public static void testCheckedAcceptsOffsetsHeld() {
    for (long offset = 5; offset <= 10; offset++) {
      assertEquals(offset, RangePlanner.checked(T0, offset, po(5, 10), true, "starting"));
    }
    assertEquals(5L, RangePlanner.checked(T0, 4, po(5, 10), false, "starting"));
    assertEquals(10L, RangePlanner.checked(T0, 11, po(5, 10), false, "starting"));
  }

  // split

  private static OffsetRange range(TopicPartition tp, long start, long end) {
    return new OffsetRange(tp, start, end, HOSTS.apply(tp));
  }

  private static List<Long> sizes(List<OffsetRange> ranges) {
    List<Long> out = new ArrayList<>();
    for (OffsetRange r : ranges) {
      out.add(r.size());
    }
    return out;
  }

  public static void testSplitWithoutOptionsKeepsRanges() {
    List<OffsetRange> ranges = Arrays.asList(range(T0, 0, 10), range(T1, 5, 6));
    assertEquals(show(ranges), show(RangePlanner.split(ranges, null, null)));
  }

  public static void testSplitDropsEmptyRanges() {
    assertEquals("[t-1[5, 6)]", show(RangePlanner.split(
        Arrays.asList(range(T0, 3, 3), range(T1, 5, 6)), null, null)));
    assertEquals("[]", show(RangePlanner.split(Arrays.asList(range(T0, 3, 3)), 4, 2L)));
  }

  public static void testSplitMaxRecordsPerPartition() {
    List<OffsetRange> got = RangePlanner.split(Arrays.asList(range(T0, 0, 10)), null, 3L);
    // ceil(10 / 3) = 4 equal pieces, none above 3, the remainder at the end.
    assertEquals("[t-0[0, 2), t-0[2, 4), t-0[4, 7), t-0[7, 10)]", show(got));
    assertEquals("[t-0[0, 5), t-0[5, 10)]",
        show(RangePlanner.split(Arrays.asList(range(T0, 0, 10)), null, 5L)));
    assertEquals("[t-0[0, 10)]",
        show(RangePlanner.split(Arrays.asList(range(T0, 0, 10)), null, 10L)));
    assertEquals("[t-0[0, 10)]",
        show(RangePlanner.split(Arrays.asList(range(T0, 0, 10)), null, 1000L)));
    assertEquals(10, RangePlanner.split(Arrays.asList(range(T0, 0, 10)), null, 1L).size());
  }

  public static void testSplitMaxRecordsNoLimitKeepsEveryRecord() {
    // maxRecordsPerPartition accepts up to Long.MAX_VALUE (RaylogOptions), i.e. "no limit":
    // the range must stay whole, not vanish (size + max - 1 must not overflow).
    List<OffsetRange> ranges = Arrays.asList(range(T0, 0, 10), range(T1, 100, 102));
    assertEquals(show(ranges), show(RangePlanner.split(ranges, null, Long.MAX_VALUE)));
    assertEquals(show(ranges), show(RangePlanner.split(ranges, null, Long.MAX_VALUE - 1)));
  }

  public static void testSplitMinPartitionsProportional() {
    List<OffsetRange> got = RangePlanner.split(
        Arrays.asList(range(T0, 0, 90), range(T1, 0, 10)), 10, null);
    assertEquals(10, got.size(), show(got));
    assertEquals(Arrays.asList(10L, 10L, 10L, 10L, 10L, 10L, 10L, 10L, 10L, 10L), sizes(got));
    int t0 = 0;
    for (OffsetRange r : got) {
      t0 += r.tp.equals(T0) ? 1 : 0;
    }
    assertEquals(9, t0, "t-0 has 90% of the records: 9 of the 10 pieces");
    assertEquals("host-t-1", got.get(9).hosts[0], "pieces keep their range's hosts");
  }

  public static void testSplitMinPartitionsGivesSmallRangesOnePiece() {
    List<OffsetRange> got = RangePlanner.split(
        Arrays.asList(range(T0, 0, 1000), range(T1, 0, 1)), 4, null);
    assertEquals("[t-0[0, 250), t-0[250, 500), t-0[500, 750), t-0[750, 1000), t-1[0, 1)]",
        show(got));
  }

  public static void testSplitMinPartitionsNoPieceOfNothing() {
    // More partitions wanted than records: a record per piece at most.
    assertEquals("[t-0[0, 1), t-0[1, 2), t-0[2, 3)]",
        show(RangePlanner.split(Arrays.asList(range(T0, 0, 3)), 100, null)));
  }

  public static void testSplitMinPartitionsAlreadyMet() {
    List<OffsetRange> ranges = Arrays.asList(range(T0, 0, 100), range(T1, 0, 1),
        range(U0, 7, 9));
    assertEquals(show(ranges), show(RangePlanner.split(ranges, 3, null)));
    assertEquals(show(ranges), show(RangePlanner.split(ranges, 2, null)));
    // maxRecordsPerPartition's pieces count towards minPartitions.
    assertEquals(4, RangePlanner.split(Arrays.asList(range(T0, 0, 40)), 4, 10L).size());
  }

  public static void testSplitMinPartitionsAndMaxRecords() {
    List<OffsetRange> got = RangePlanner.split(Arrays.asList(range(T0, 0, 100)), 8, 50L);
    for (OffsetRange r : got) {
      assertTrue(r.size() <= 50, "piece above maxRecordsPerPartition: " + r);
    }
    assertEquals(8, got.size(), show(got));
  }

  public static void testSplitCoversEveryOffsetExactlyOnce() {
    Random random = new Random(7L);
    for (int round = 0; round < 2000; round++) {
      List<OffsetRange> ranges = new ArrayList<>();
      int n = 1 + random.nextInt(6);
      for (int p = 0; p < n; p++) {
        long start = random.nextInt(3) == 0 ? (1L << 50) + random.nextInt(1000)
            : random.nextInt(1000);
        long size = random.nextInt(5) == 0 ? 0 : 1 + random.nextInt(random.nextBoolean() ? 5
            : 600);
        ranges.add(range(new TopicPartition(random.nextBoolean() ? "a" : "b", p), start,
            start + size));
      }
      Integer minPartitions = random.nextBoolean() ? null : 1 + random.nextInt(60);
      Long max = random.nextBoolean() ? null : 1L + random.nextInt(random.nextBoolean()
          ? 10 : 400);
      String input = ranges + " minPartitions=" + minPartitions + " max=" + max;
      List<OffsetRange> got = RangePlanner.split(ranges, minPartitions, max);

      Map<TopicPartition, List<OffsetRange>> pieces = new HashMap<>();
      for (OffsetRange r : got) {
        assertTrue(r.size() > 0, "empty piece " + r + " of " + input);
        assertTrue(max == null || r.size() <= max, "piece " + r + " above max: " + input);
        pieces.computeIfAbsent(r.tp, k -> new ArrayList<>()).add(r);
        assertEquals("host-" + r.tp, r.hosts[0], "hosts of " + r);
      }
      int nonEmpty = 0;
      for (OffsetRange r : ranges) {
        List<OffsetRange> mine = pieces.getOrDefault(r.tp, new ArrayList<>());
        mine.sort(Comparator.comparingLong(x -> x.start));
        if (r.size() == 0) {
          assertTrue(mine.isEmpty(), "pieces of the empty range " + r + ": " + input);
          continue;
        }
        nonEmpty++;
        long at = r.start;
        for (OffsetRange piece : mine) {
          if (piece.start != at) {
            fail((piece.start > at ? "gap" : "overlap") + " at " + at + " in " + mine
                + " for " + input);
          }
          at = piece.end;
        }
        assertEquals(r.end, at, "the pieces of " + r + " end: " + mine + " for " + input);
        if (max != null && (minPartitions == null)) {
          assertEquals((r.size() + max - 1) / max, (long) mine.size(), "pieces of " + r
              + " for max " + max);
        }
      }
      assertTrue(got.size() >= nonEmpty, "fewer pieces than ranges: " + input);
    }
  }

  // rateLimit

  public static void testRateLimitUnderLimitReadsAll() {
    SortedMap<TopicPartition, Long> until = map(T0, 100L, T1, 50L);
    assertEquals(until, RangePlanner.rateLimit(map(T0, 0L, T1, 0L), until, 150));
    assertEquals(until, RangePlanner.rateLimit(map(T0, 90L, T1, 45L), until, 1000));
  }

  public static void testRateLimitProportionalShares() {
    assertEquals(map(T0, 75L, T1, 125L),
        RangePlanner.rateLimit(map(T0, 0L, T1, 100L), map(T0, 300L, T1, 200L), 100));
    assertEquals(map(T0, 33L, T1, 33L, U0, 33L), RangePlanner.rateLimit(
        map(T0, 0L, T1, 0L, U0, 0L), map(T0, 1000L, T1, 1000L, U0, 1000L), 100));
  }

  public static void testRateLimitEveryWaitingPartitionGetsOne() {
    assertEquals(map(T0, 9L, T1, 1L),
        RangePlanner.rateLimit(map(T0, 0L, T1, 0L), map(T0, 1000L, T1, 1L), 10));
    assertEquals(map(T0, 1L, T1, 1L, U0, 1L), RangePlanner.rateLimit(
        map(T0, 0L, T1, 0L, U0, 0L), map(T0, 10L, T1, 10L, U0, 10L), 1));
  }

  public static void testRateLimitLeavesPartitionsWithNothingWaiting() {
    // t-1 has nothing waiting, u-0's high watermark is below where the stream is (a loss the
    // planner reports): both keep their given end.
    assertEquals(map(T0, 10L, T1, 5L, U0, 3L), RangePlanner.rateLimit(
        map(T0, 0L, T1, 5L, U0, 8L), map(T0, 100L, T1, 5L, U0, 3L), 10));
  }

  public static void testRateLimitProperty() {
    Random random = new Random(11L);
    for (int round = 0; round < 3000; round++) {
      SortedMap<TopicPartition, Long> from = new TreeMap<>();
      SortedMap<TopicPartition, Long> until = new TreeMap<>();
      int n = 1 + random.nextInt(8);
      long total = 0;
      for (int p = 0; p < n; p++) {
        TopicPartition tp = new TopicPartition("t", p);
        long begin = random.nextInt(3) == 0 ? (1L << 52) + random.nextInt(100)
            : random.nextInt(100);
        long waiting = random.nextInt(6) == 0 ? -random.nextInt(5)
            : random.nextInt(random.nextBoolean() ? 10 : 5000);
        from.put(tp, begin);
        until.put(tp, begin + waiting);
        total += Math.max(0, waiting);
      }
      long limit = 1 + random.nextInt(random.nextBoolean() ? 20 : 3000);
      String input = "from " + from + " until " + until + " limit " + limit;
      SortedMap<TopicPartition, Long> got = RangePlanner.rateLimit(from, until, limit);
      assertEquals(until.keySet(), got.keySet(), input);
      long read = 0;
      for (TopicPartition tp : until.keySet()) {
        long begin = from.get(tp);
        long end = got.get(tp);
        long high = until.get(tp);
        assertTrue(end <= high, "beyond until: " + tp + "=" + end + " for " + input);
        if (high <= begin) {
          assertEquals(high, end, "nothing waiting in " + tp + " for " + input);
          continue;
        }
        assertTrue(end > begin, "starved " + tp + " for " + input);
        if (total > limit) {
          double share = limit * (double) (high - begin) / total;
          assertTrue(Math.abs((end - begin) - share) <= 1.0, "share of " + tp + ": "
              + (end - begin) + " for " + share + " in " + input);
        }
        read += end - begin;
      }
      if (total <= limit) {
        assertEquals(until, got, "under the limit " + input);
      } else {
        assertTrue(read <= limit + n, "read " + read + " for " + input);
        assertTrue(read >= limit - n, "read only " + read + " for " + input);
      }
    }
  }

  // -- pack ---------------------------------------------------------------------------------

  public static void testPackFillsTasksUpToTheBudgetAndKeepsHostsApart() {
    Random random = new Random(13);
    for (int round = 0; round < 500; round++) {
      List<OffsetRange> ranges = new ArrayList<>();
      int count = 1 + random.nextInt(12);
      for (int p = 0; p < count; p++) {
        long start = random.nextInt(1000);
        String[] hosts = random.nextBoolean() ? new String[] {"a"} : new String[] {"b", "c"};
        ranges.add(new OffsetRange(new TopicPartition("t", p), start,
            start + 1 + random.nextInt(5000), hosts));
      }
      Map<TopicPartition, Double> perRecord = new HashMap<>();
      for (OffsetRange r : ranges) {
        perRecord.put(r.tp, 1.0 + random.nextInt(100));
      }
      long budget = 1 + random.nextInt(400_000);
      List<List<OffsetRange>> tasks = RangePlanner.pack(ranges, perRecord::get, budget);
      List<OffsetRange> seen = new ArrayList<>();
      for (List<OffsetRange> task : tasks) {
        assertTrue(!task.isEmpty(), "no empty task");
        double bytes = 0;
        for (OffsetRange r : task) {
          bytes += r.size() * perRecord.get(r.tp);
          assertEquals(Arrays.asList(task.get(0).hosts), Arrays.asList(r.hosts));
        }
        assertTrue(task.size() == 1 || bytes <= budget, "a task of several ranges within budget");
        seen.addAll(task);
      }
      assertEquals(ranges.size(), seen.size());
      assertTrue(seen.containsAll(ranges), "every range in exactly one task");
    }
  }

  public static void testPackPutsSmallRangesTogether() {
    List<OffsetRange> ranges = new ArrayList<>();
    for (int p = 5; p >= 0; p--) {
      ranges.add(new OffsetRange(new TopicPartition("t", p), 0, 100, new String[] {"h"}));
    }
    List<List<OffsetRange>> tasks = RangePlanner.pack(ranges, tp -> 10.0, 2_000);
    assertEquals(3, tasks.size()); // 1,000 bytes each, two to a task
    assertEquals(new TopicPartition("t", 0), tasks.get(0).get(0).tp); // offset order inside
  }
}
