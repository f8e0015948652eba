package io.raylog.spark;

import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertFalse;
import static io.raylog.spark.Check.assertThrows;
import static io.raylog.spark.Check.assertTrue;

import java.util.Random;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/** A stream's position and its JSON (what the checkpoint holds). */
public final class SourceOffsetTest {
  private SourceOffsetTest() {}

  private static final TopicPartition T0 = new TopicPartition("t", 0);
  private static final TopicPartition T1 = new TopicPartition("t", 1);
  private static final TopicPartition T10 = new TopicPartition("t", 10);
  private static final TopicPartition U0 = new TopicPartition("u", 0);

  private static SortedMap<TopicPartition, Long> offsets(Object... keysAndValues) {
    return RangePlannerTest.map(keysAndValues);
  }

  public static void testJsonIsSparksKafkaForm() {
    assertEquals("{\"t\":{\"0\":5,\"1\":7}}",
        new RaylogSourceOffset(offsets(T1, 7L, T0, 5L)).json());
    assertEquals("{\"t\":{\"0\":5,\"1\":7,\"10\":2},\"u\":{\"0\":0}}",
        new RaylogSourceOffset(offsets(T10, 2L, U0, 0L, T1, 7L, T0, 5L)).json());
    assertEquals("{}", new RaylogSourceOffset(new TreeMap<>()).json());
  }

  public static void testParseJsonRoundTrip() {
    RaylogSourceOffset offset = new RaylogSourceOffset(offsets(T0, 5L, T1, 7L, U0, 0L));
    RaylogSourceOffset back = RaylogSourceOffset.parse(offset.json());
    assertEquals(offset.offsets, back.offsets);
    assertEquals(offset.json(), back.json());
    assertEquals(offset, back);
  }

  public static void testRoundTripOfManyOffsets() {
    Random random = new Random(3L);
    for (int round = 0; round < 200; round++) {
      SortedMap<TopicPartition, Long> map = new TreeMap<>();
      for (int i = random.nextInt(10); i > 0; i--) {
        map.put(new TopicPartition("topic" + random.nextInt(3), random.nextInt(50)),
            random.nextLong() & Long.MAX_VALUE);
      }
      RaylogSourceOffset offset = new RaylogSourceOffset(map);
      RaylogSourceOffset back = RaylogSourceOffset.parse(offset.json());
      assertEquals(map, back.offsets, offset.json());
      assertEquals(offset, back, offset.json());
    }
  }

  public static void testParseAcceptsAnyLayout() {
    RaylogSourceOffset parsed = RaylogSourceOffset.parse(" {\"t\" : {\"1\":7, \"0\":5}} ");
    assertEquals(offsets(T0, 5L, T1, 7L), parsed.offsets);
    assertEquals("{\"t\":{\"0\":5,\"1\":7}}", parsed.json());
  }

  public static void testEquality() {
    RaylogSourceOffset a = new RaylogSourceOffset(offsets(T0, 5L, T1, 7L));
    RaylogSourceOffset b = RaylogSourceOffset.parse("{\"t\":{\"1\":7,\"0\":5}}");
    assertEquals(a, b);
    assertEquals(b, a);
    assertEquals(a.hashCode(), b.hashCode(), "hash codes of equal offsets");
    assertFalse(a.equals(new RaylogSourceOffset(offsets(T0, 5L, T1, 8L))), "other offset");
    assertFalse(a.equals(new RaylogSourceOffset(offsets(T0, 5L))), "fewer partitions");
    assertFalse(a.equals(new RaylogSourceOffset(offsets(T0, 5L, T1, 7L, U0, 0L))),
        "more partitions");
    assertFalse(a.equals(a.json()), "an offset is not its JSON string");
    // Spark compares offsets of any kind (e.g. as read back from the offset log) by JSON.
    Offset serialized = new Offset() {
      @Override
      public String json() {
        return "{\"t\":{\"0\":5,\"1\":7}}";
      }
    };
    assertTrue(a.equals(serialized), "equal to any offset with the same JSON");
  }

  public static void testOffsetsAreACopyAndUnmodifiable() {
    SortedMap<TopicPartition, Long> map = offsets(T0, 5L);
    RaylogSourceOffset offset = new RaylogSourceOffset(map);
    map.put(T1, 9L);
    assertEquals(offsets(T0, 5L), offset.offsets, "later changes of the map given");
    assertThrows(UnsupportedOperationException.class, () -> offset.offsets.put(T1, 1L), null);
  }

  public static void testParseRefusesBadJson() {
    assertThrows(IllegalArgumentException.class, () -> RaylogSourceOffset.parse("{"),
        "option 'offset'");
    assertThrows(IllegalArgumentException.class,
        () -> RaylogSourceOffset.parse("{\"t\":{\"x\":5}}"), "partition 'x' is not a number");
    assertThrows(IllegalArgumentException.class,
        () -> RaylogSourceOffset.parse("{\"t\":{\"0\":\"5\"}}"), "is not an integer");
  }
}
