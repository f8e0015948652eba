package io.raylog.spark;

import static io.raylog.spark.Check.assertContains;
import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertThrows;
import static io.raylog.spark.Check.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.SortedMap;
import java.util.TreeMap;

/** The JSON of Spark's Kafka source options and offsets. */
public final class OffsetsJsonTest {
  private OffsetsJsonTest() {}

  static TopicPartition tp(String topic, int partition) {
    return new TopicPartition(topic, partition);
  }

  private static SortedMap<TopicPartition, Long> parse(String json) {
    return OffsetsJson.parsePartitionValues(json, "startingOffsets");
  }

  private static void refused(String json, String why) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> parse(json), why);
    // Every refusal names the option and shows the shape wanted.
    assertContains(e.getMessage(), "option 'startingOffsets'");
    assertContains(e.getMessage(), "{\"topicA\":{\"0\":23,\"1\":-1},\"topicB\":{\"0\":-2}}");
  }

  public static void testParsesKafkaStyleOffsets() {
    SortedMap<TopicPartition, Long> got =
        parse("{\"topicA\":{\"0\":23,\"1\":-1},\"topicB\":{\"0\":-2}}");
    Map<TopicPartition, Long> want = new HashMap<>();
    want.put(tp("topicA", 0), 23L);
    want.put(tp("topicA", 1), -1L);
    want.put(tp("topicB", 0), -2L);
    assertEquals(want, got);
    assertEquals(Arrays.asList(tp("topicA", 0), tp("topicA", 1), tp("topicB", 0)),
        new ArrayList<>(got.keySet()), "keys in topic, then partition order");
  }

  public static void testEarliestAndLatestMeanMinus2AndMinus1() {
    assertEquals(-2L, OffsetsJson.EARLIEST);
    assertEquals(-1L, OffsetsJson.LATEST);
    SortedMap<TopicPartition, Long> got = parse("{\"t\":{\"0\":-2,\"1\":-1}}");
    assertEquals(OffsetsJson.EARLIEST, got.get(tp("t", 0)));
    assertEquals(OffsetsJson.LATEST, got.get(tp("t", 1)));
  }

  public static void testPartitionsOrderedNumerically() {
    SortedMap<TopicPartition, Long> got = parse("{\"t\":{\"10\":1,\"2\":2,\"1\":3}}");
    assertEquals(Arrays.asList(tp("t", 1), tp("t", 2), tp("t", 10)),
        new ArrayList<>(got.keySet()));
  }

  public static void testWhitespaceAndLargeOffsets() {
    SortedMap<TopicPartition, Long> got =
        parse("  { \"t\" : { \"0\" : 9223372036854775807 } }\n");
    assertEquals(Long.MAX_VALUE, got.get(tp("t", 0)));
  }

  public static void testEmptyObjectsNameNoPartition() {
    // Which partitions must be named is the planner's business, not the parser's.
    assertTrue(parse("{}").isEmpty(), "{} is no partition");
    assertTrue(parse("{\"t\":{}}").isEmpty(), "a topic of no partition");
  }

  public static void testMalformedJsonRefused() {
    refused("{", "");
    refused("{\"t\":{\"0\":1}", "");
    refused("not json", "");
    refused("{'t':{'0':1}}", "");
    refused("", "it is empty");
    refused("   ", "it is empty");
    assertThrows(IllegalArgumentException.class, () -> parse(null), "it is empty");
  }

  public static void testNotAnObjectRefused() {
    refused("[]", "not a JSON object");
    refused("5", "not a JSON object");
    refused("\"earliest\"", "not a JSON object");
    refused("null", "not a JSON object");
    refused("[{\"t\":{\"0\":1}}]", "not a JSON object");
  }

  public static void testNonIntegerPartitionKeysRefused() {
    refused("{\"t\":{\"a\":1}}", "partition 'a' is not a number >= 0");
    refused("{\"t\":{\"1.5\":1}}", "partition '1.5' is not a number >= 0");
    refused("{\"t\":{\"\":1}}", "partition '' is not a number >= 0");
    refused("{\"t\":{\" 1\":1}}", "partition ' 1' is not a number >= 0");
    refused("{\"t\":{\"2147483648\":1}}", "partition '2147483648' is not a number >= 0");
  }

  public static void testNegativePartitionsRefused() {
    refused("{\"t\":{\"-1\":5}}", "partition '-1' is not a number >= 0");
    refused("{\"t\":{\"0\":5,\"-3\":5}}", "partition '-3' is not a number >= 0");
  }

  public static void testNonNumericOffsetsRefused() {
    refused("{\"t\":{\"0\":\"5\"}}", "the value of t-0 is not an integer");
    refused("{\"t\":{\"0\":\"earliest\"}}", "the value of t-0 is not an integer");
    refused("{\"t\":{\"0\":1.5}}", "the value of t-0 is not an integer");
    refused("{\"t\":{\"0\":1e3}}", "the value of t-0 is not an integer");
    refused("{\"t\":{\"0\":true}}", "the value of t-0 is not an integer");
    refused("{\"t\":{\"0\":null}}", "the value of t-0 is not an integer");
    // Beyond a long: not silently wrapped.
    refused("{\"t\":{\"0\":9223372036854775808}}", "the value of t-0 is not an integer");
  }

  public static void testNestedWrongShapesRefused() {
    refused("{\"t\":[0,1]}", "topic t maps to no object");
    refused("{\"t\":5}", "topic t maps to no object");
    refused("{\"t\":null}", "topic t maps to no object");
    refused("{\"a\":{\"0\":1},\"b\":\"x\"}", "topic b maps to no object");
    refused("{\"t\":{\"0\":{\"offset\":1}}}", "the value of t-0 is not an integer");
    refused("{\"t\":{\"0\":[1]}}", "the value of t-0 is not an integer");
  }

  public static void testOptionNamedInErrors() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> OffsetsJson.parsePartitionValues("{", "endingOffsetsByTimestamp"), null);
    assertContains(e.getMessage(), "option 'endingOffsetsByTimestamp'");
    assertContains(e.getMessage(), "got {");
  }

  public static void testParseAssign() {
    assertEquals(Arrays.asList(tp("t", 0), tp("t", 1)), OffsetsJson.parseAssign("{\"t\":[0,1]}"));
    assertEquals(Arrays.asList(tp("topicA", 0), tp("topicA", 1), tp("topicB", 2),
        tp("topicB", 4)), OffsetsJson.parseAssign("{\"topicA\":[0,1],\"topicB\":[2,4]}"));
  }

  public static void testParseAssignRefusesBadShapes() {
    String example = "{\"topicA\":[0,1],\"topicB\":[2,4]}";
    for (String bad : new String[] {"", "{", "[0,1]", "5", "null"}) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
          () -> OffsetsJson.parseAssign(bad), "option 'assign'");
      assertContains(e.getMessage(), example);
    }
    assertThrows(IllegalArgumentException.class,
        () -> OffsetsJson.parseAssign("{\"t\":0}"), "topic t maps to no list");
    assertThrows(IllegalArgumentException.class,
        () -> OffsetsJson.parseAssign("{\"t\":{\"0\":1}}"), "topic t maps to no list");
    for (String part : new String[] {"-1", "\"0\"", "1.5", "null", "true", "[0]",
        "2147483648"}) {
      assertThrows(IllegalArgumentException.class,
          () -> OffsetsJson.parseAssign("{\"t\":[0," + part + "]}"),
          "partitions of t must be integers >= 0");
    }
  }

  public static void testParseAssignOfNothingRefused() {
    assertThrows(IllegalArgumentException.class, () -> OffsetsJson.parseAssign("{}"),
        "assign names no partition");
    assertThrows(IllegalArgumentException.class, () -> OffsetsJson.parseAssign("{\"t\":[]}"),
        "assign names no partition");
  }

  public static void testFormatExactForm() {
    Map<TopicPartition, Long> offsets = new HashMap<>();
    offsets.put(tp("t", 1), 7L);
    offsets.put(tp("t", 0), 5L);
    assertEquals("{\"t\":{\"0\":5,\"1\":7}}", OffsetsJson.format(offsets));
  }

  public static void testFormatOrdersTopicsThenPartitionsNumerically() {
    Map<TopicPartition, Long> offsets = new HashMap<>();
    offsets.put(tp("b", 0), -2L);
    offsets.put(tp("a", 10), 2L);
    offsets.put(tp("a", 2), 1L);
    offsets.put(tp("a", 1), -1L);
    assertEquals("{\"a\":{\"1\":-1,\"2\":1,\"10\":2},\"b\":{\"0\":-2}}",
        OffsetsJson.format(offsets));
    assertEquals("{}", OffsetsJson.format(new HashMap<>()));
  }

  public static void testFormatEscapesTopicNames() {
    Map<TopicPartition, Long> offsets = new TreeMap<>();
    offsets.put(tp("we\"ird\\name", 0), 1L);
    String json = OffsetsJson.format(offsets);
    assertEquals("{\"we\\\"ird\\\\name\":{\"0\":1}}", json);
    assertEquals(offsets, parse(json));
  }

  public static void testFormatParseRoundTrip() {
    Random random = new Random(20240601L);
    String[] topics = {"t", "topic.with.dots", "a-b_c", "ünïcode", "x\"y", "10"};
    for (int round = 0; round < 300; round++) {
      SortedMap<TopicPartition, Long> offsets = new TreeMap<>();
      int n = random.nextInt(12);
      for (int i = 0; i < n; i++) {
        long value = random.nextInt(4) == 0 ? -1 - random.nextInt(2)
            : random.nextLong() & Long.MAX_VALUE;
        offsets.put(tp(topics[random.nextInt(topics.length)], random.nextInt(40)), value);
      }
      String json = OffsetsJson.format(offsets);
      assertEquals(offsets, parse(json), json);
      assertEquals(json, OffsetsJson.format(parse(json)), "format of the parse of " + json);
    }
  }

  public static void testAssignPartitionsAreTopicPartitions() {
    List<TopicPartition> got = OffsetsJson.parseAssign("{\"t\":[3]}");
    assertEquals("t", got.get(0).topic);
    assertEquals(3, got.get(0).partition);
    assertEquals("t-3", got.get(0).toString());
  }
}
