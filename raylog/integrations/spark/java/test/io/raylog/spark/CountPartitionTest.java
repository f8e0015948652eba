package io.raylog.spark;

import static io.raylog.spark.Check.assertContains;
import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertThrows;
import static io.raylog.spark.Check.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.catalyst.InternalRow;

/** Counts answered from offsets, and their data-loss check at run time. */
public final class CountPartitionTest {
  private CountPartitionTest() {}

  private static final TopicPartition T0 = new TopicPartition("t", 0);
  private static final TopicPartition T1 = new TopicPartition("t", 1);
  private static final TopicPartition U0 = new TopicPartition("u", 0);

  private static OffsetRange range(TopicPartition tp, long start, long end) {
    return new OffsetRange(tp, start, end, null);
  }

  /** t-0 [5, 10), t-1 [0, 3), u-0 [2, 4): 10 records. */
  private static List<OffsetRange> ranges() {
    return Arrays.asList(range(T0, 5, 10), range(T1, 0, 3), range(U0, 2, 4));
  }

  /** Log starts no later than the ranges' starts: nothing deleted. */
  private static Map<TopicPartition, PartitionOffsets> intact() {
    Map<TopicPartition, PartitionOffsets> now = new HashMap<>();
    now.put(T0, new PartitionOffsets(5, 12, null));
    now.put(T1, new PartitionOffsets(0, 3, null));
    now.put(U0, new PartitionOffsets(1, 9, null));
    return now;
  }

  private static CountPartition count(List<OffsetRange> ranges, boolean byTopic,
      boolean byPartition, boolean topicFirst, int counts, boolean failOnDataLoss) {
    return new CountPartition(ranges, byTopic, byPartition, topicFirst, counts, failOnDataLoss,
        1000L);
  }

  /** A row as text: strings, ints and longs, as the row's schema says they are. */
  private static String show(InternalRow row, String types) {
    List<String> out = new ArrayList<>();
    assertEquals(types.length(), row.numFields(), "fields of the row");
    for (int i = 0; i < types.length(); i++) {
      switch (types.charAt(i)) {
        case 's':
          out.add(row.getUTF8String(i).toString());
          break;
        case 'i':
          assertTrue(row.get(i, org.apache.spark.sql.types.DataTypes.IntegerType)
              instanceof Integer, "field " + i + " is an int");
          out.add(Integer.toString(row.getInt(i)));
          break;
        default:
          assertTrue(row.get(i, org.apache.spark.sql.types.DataTypes.LongType) instanceof Long,
              "field " + i + " is a long");
          out.add(Long.toString(row.getLong(i)));
      }
    }
    return String.join(",", out);
  }

  /** The rows as a set of text (groups have no order). */
  private static Set<String> show(List<InternalRow> rows, String types) {
    Set<String> out = new TreeSet<>();
    for (InternalRow row : rows) {
      out.add(show(row, types));
    }
    assertEquals(rows.size(), out.size(), "one row per group");
    return out;
  }

  private static Set<String> set(String... rows) {
    return new TreeSet<>(Arrays.asList(rows));
  }

  public static void testUngroupedCount() {
    List<InternalRow> rows = count(ranges(), false, false, true, 1, true).rows(intact());
    assertEquals(1, rows.size());
    assertEquals("10", show(rows.get(0), "l"));
  }

  public static void testSeveralCountsAreEqual() {
    List<InternalRow> rows = count(ranges(), false, false, true, 3, true).rows(intact());
    assertEquals(1, rows.size());
    assertEquals("10,10,10", show(rows.get(0), "lll"));
  }

  public static void testCountOfNothingIsOneRowOfZero() {
    List<InternalRow> rows = count(Collections.emptyList(), false, false, true, 1, true)
        .rows(new HashMap<>());
    assertEquals(1, rows.size());
    assertEquals("0", show(rows.get(0), "l"));
    rows = count(Arrays.asList(range(T0, 5, 5)), false, false, true, 2, true).rows(intact());
    assertEquals(1, rows.size());
    assertEquals("0,0", show(rows.get(0), "ll"));
  }

  public static void testGroupedByTopic() {
    assertEquals(set("t,8", "u,2"),
        show(count(ranges(), true, false, true, 1, true).rows(intact()), "sl"));
  }

  public static void testGroupedByPartition() {
    // GROUP BY partition alone: partition 0 of both topics is one group.
    assertEquals(set("0,7", "1,3"),
        show(count(ranges(), false, true, true, 1, true).rows(intact()), "il"));
  }

  public static void testGroupedByTopicThenPartition() {
    assertEquals(set("t,0,5,5", "t,1,3,3", "u,0,2,2"),
        show(count(ranges(), true, true, true, 2, true).rows(intact()), "sill"));
  }

  public static void testGroupedByPartitionThenTopic() {
    assertEquals(set("0,t,5", "1,t,3", "0,u,2"),
        show(count(ranges(), true, true, false, 1, true).rows(intact()), "isl"));
  }

  public static void testSeveralRangesOfAPartitionAddUp() {
    List<OffsetRange> pieces = Arrays.asList(range(T0, 5, 7), range(T0, 7, 10),
        range(T1, 0, 3));
    assertEquals(set("t,0,5", "t,1,3"),
        show(count(pieces, true, true, true, 1, true).rows(intact()), "sil"));
  }

  public static void testGroupsWithoutRecordsHaveNoRow() {
    List<OffsetRange> some = Arrays.asList(range(T0, 5, 10), range(T1, 3, 3), range(U0, 2, 2));
    assertEquals(set("t,0,5"), show(count(some, true, true, true, 1, true).rows(intact()),
        "sil"));
    assertEquals(set("t,5"), show(count(some, true, false, true, 1, true).rows(intact()), "sl"));
    assertEquals(0, count(Collections.emptyList(), true, false, true, 1, true)
        .rows(new HashMap<>()).size(), "grouped count of nothing");
    assertEquals(0, count(Collections.emptyList(), false, true, true, 1, true)
        .rows(new HashMap<>()).size(), "grouped count of nothing");
  }

  private static Map<TopicPartition, PartitionOffsets> t0LogStart(long logStart) {
    Map<TopicPartition, PartitionOffsets> now = intact();
    now.put(T0, new PartitionOffsets(logStart, 20, null));
    return now;
  }

  public static void testDataLossAtRunTimeFails() {
    RangePlanner.DataLossException e = assertThrows(RangePlanner.DataLossException.class,
        () -> count(ranges(), false, false, true, 1, true).rows(t0LogStart(7)),
        "Cannot count t-0[5, 10): records below 7 were deleted since the query was planned.");
    assertContains(e.getMessage(), RangePlanner.DATA_LOSS_HINT);
    assertThrows(RangePlanner.DataLossException.class,
        () -> count(ranges(), true, true, true, 1, true).rows(t0LogStart(6)), "t-0[5, 10)");
  }

  public static void testDataLossAtRunTimeCountsWhatIsLeft() {
    assertEquals("8", show(count(ranges(), false, false, true, 1, false).rows(t0LogStart(7))
        .get(0), "l"));
    assertEquals(set("t,0,3", "t,1,3", "u,0,2"),
        show(count(ranges(), true, true, true, 1, false).rows(t0LogStart(7)), "sil"));
    // All of t-0's range deleted: it counts nothing, and its group has no row.
    assertEquals("5", show(count(ranges(), false, false, true, 1, false).rows(t0LogStart(15))
        .get(0), "l"));
    assertEquals(set("t,1,3", "u,0,2"),
        show(count(ranges(), true, true, true, 1, false).rows(t0LogStart(15)), "sil"));
  }

  public static void testLogStartAtRangeStartIsNoLoss() {
    assertEquals("10", show(count(ranges(), false, false, true, 1, true).rows(t0LogStart(5))
        .get(0), "l"));
  }
}
