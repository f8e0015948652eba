package io.raylog.spark;

import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertFalse;
import static io.raylog.spark.Check.assertThrows;
import static io.raylog.spark.Check.assertThrowsIgnoringCase;
import static io.raylog.spark.Check.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

/** The options of format("raylog"), checked as Spark's Kafka source checks its own. */
public final class RaylogOptionsTest {
  private RaylogOptionsTest() {}

  /** Options from alternating keys and values. */
  static Map<String, String> opts(String... keysAndValues) {
    Map<String, String> out = new HashMap<>();
    for (int i = 0; i < keysAndValues.length; i += 2) {
      out.put(keysAndValues[i], keysAndValues[i + 1]);
    }
    return out;
  }

  private static RaylogOptions batch(String... keysAndValues) {
    return RaylogOptions.forBatch(opts(keysAndValues));
  }

  private static RaylogOptions stream(String... keysAndValues) {
    return RaylogOptions.forStreaming(opts(keysAndValues));
  }

  /** Refusals name the option (matched ignoring case, as option names are). */
  private static void batchRefused(String fragment, String... keysAndValues) {
    assertThrowsIgnoringCase(IllegalArgumentException.class, () -> batch(keysAndValues),
        fragment);
  }

  private static void streamRefused(String fragment, String... keysAndValues) {
    assertThrowsIgnoringCase(IllegalArgumentException.class, () -> stream(keysAndValues),
        fragment);
  }

  private static TopicPartition tp(String topic, int partition) {
    return new TopicPartition(topic, partition);
  }

  public static void testSubscribe() {
    RaylogOptions o = batch("subscribe", "t");
    assertEquals(RaylogOptions.SubscriptionKind.SUBSCRIBE, o.subscription);
    assertEquals(Collections.singletonList("t"), o.topics);
    assertEquals(Collections.emptyList(), o.assigned);
    assertEquals(null, o.pattern);
  }

  public static void testSubscribeListTrimmedAndDeduplicated() {
    assertEquals(Arrays.asList("a", "b"), batch("subscribe", " a, b,,a ,").topics);
  }

  public static void testSubscribeOfNothingRefused() {
    batchRefused("No topics to subscribe to as specified value for option 'subscribe' is ' , '",
        "subscribe", " , ");
    batchRefused("No topics to subscribe to", "subscribe", "");
  }

  public static void testSubscribePattern() {
    RaylogOptions o = stream("subscribePattern", "topic-.*");
    assertEquals(RaylogOptions.SubscriptionKind.PATTERN, o.subscription);
    assertEquals("topic-.*", o.pattern);
    assertTrue(o.topics.isEmpty(), "no topics listed");
    batchRefused("Pattern to subscribe is empty", "subscribePattern", "  ");
    batchRefused("Option 'subscribePattern' is not a regular expression",
        "subscribePattern", "t(");
  }

  public static void testAssign() {
    RaylogOptions o = batch("assign", "{\"t\":[0,1],\"u\":[3]}");
    assertEquals(RaylogOptions.SubscriptionKind.ASSIGN, o.subscription);
    assertEquals(Arrays.asList(tp("t", 0), tp("t", 1), tp("u", 3)), o.assigned);
    batchRefused("option 'assign'", "assign", "[0]");
    batchRefused("assign names no partition", "assign", "{}");
  }

  public static void testExactlyOneSubscriptionOption() {
    batchRefused("One of the following options must be specified for the raylog source: "
        + "subscribe, subscribePattern, assign.");
    streamRefused("One of the following options must be specified", "startingOffsets",
        "earliest");
    batchRefused("Only one of the following options can be specified", "subscribe", "t",
        "subscribePattern", "t.*");
    batchRefused("Only one of the following options", "subscribe", "t", "assign",
        "{\"t\":[0]}");
    streamRefused("Only one of the following options", "subscribePattern", "t.*",
        "assign", "{\"t\":[0]}");
    batchRefused("Only one of the following options", "subscribe", "t", "subscribePattern",
        "t.*", "assign", "{\"t\":[0]}");
  }

  public static void testOptionKeysCaseInsensitive() {
    RaylogOptions o = batch("SubscribePattern", "t.*", "STARTINGOFFSETS", "{\"t\":{\"0\":3}}",
        "EndingOffsets", "{\"t\":{\"0\":9}}", "FailOnDataLoss", "false",
        "IncludeHeaders", "TRUE", "MinPartitions", "4", "MAXRECORDSPERPARTITION", "100",
        "fetchTimeoutMS", "5000", "StartingOffsetsByTimestampStrategy", "Latest");
    assertEquals(RaylogOptions.SubscriptionKind.PATTERN, o.subscription);
    assertEquals(Bound.Kind.OFFSETS, o.starting.kind);
    assertEquals(3L, o.starting.values.get(tp("t", 0)));
    assertEquals(9L, o.ending.values.get(tp("t", 0)));
    assertFalse(o.failOnDataLoss, "failOnDataLoss");
    assertTrue(o.includeHeaders, "includeHeaders");
    assertEquals(4, o.minPartitions);
    assertEquals(100L, o.maxRecordsPerPartition);
    assertEquals(5000L, o.fetchTimeoutMs);
    assertTrue(o.startingLatestIfNoTimestampMatch, "strategy latest");
    assertTrue(RaylogOptions.includeHeaders(opts("INCLUDEHEADERS", "true")), "includeHeaders");
    assertEquals(RaylogOptions.SubscriptionKind.ASSIGN,
        stream("ASSIGN", "{\"t\":[0]}").subscription);
  }

  public static void testBatchDefaults() {
    RaylogOptions o = batch("subscribe", "t");
    assertEquals(Bound.EARLIEST, o.starting);
    assertEquals(Bound.LATEST, o.ending);
    assertFalse(o.includeHeaders, "includeHeaders is false by default");
    assertTrue(o.failOnDataLoss, "failOnDataLoss is true by default");
    assertFalse(o.startingLatestIfNoTimestampMatch, "the strategy is 'error' by default");
    assertEquals(null, o.minPartitions);
    assertEquals(null, o.maxRecordsPerPartition);
    assertEquals(null, o.maxOffsetsPerTrigger);
    assertEquals(120_000L, o.fetchTimeoutMs);
  }

  public static void testStreamingDefaults() {
    RaylogOptions o = stream("subscribe", "t");
    assertEquals(Bound.LATEST, o.starting);
    assertEquals(Bound.LATEST, o.ending);
    assertFalse(o.includeHeaders, "includeHeaders");
    assertTrue(o.failOnDataLoss, "failOnDataLoss");
  }

  public static void testKafkaOptionsIgnored() {
    RaylogOptions o = batch("subscribe", "t", "kafka.bootstrap.servers", "host:9092",
        "kafka.group.id", "g");
    assertEquals(Bound.EARLIEST, o.starting);
  }

  public static void testValueFormat() {
    RaylogOptions.ValueFormat bytes = batch("subscribe", "t").valueFormat;
    assertFalse(bytes.avro, "bytes by default");
    assertFalse(batch("subscribe", "t", "valueFormat", "Binary").valueFormat.avro, "binary");
    RaylogOptions.ValueFormat avro = batch("subscribe", "t", "valueFormat", "AVRO").valueFormat;
    assertTrue(avro.avro, "avro");
    assertEquals("t-value", avro.subject);
    assertEquals("latest", avro.version);
    assertEquals(null, avro.schema);
    assertFalse(avro.errorsAsNull, "errors fail the task by default");
    avro = stream("assign", "{\"u\": [0, 1]}", "valueFormat", "avro", "valueSchemaVersion", "3",
        "valueFormatErrors", "null").valueFormat;
    assertEquals(Arrays.asList("u-value", "3", true),
        Arrays.asList(avro.subject, avro.version, avro.errorsAsNull));
    avro = batch("subscribePattern", "t.*", "valueFormat", "avro", "valueSchema", "\"long\"")
        .valueFormat;
    assertEquals(Arrays.asList(null, "\"long\""), Arrays.asList(avro.subject, avro.schema));
    avro = batch("subscribe", "a,b", "valueFormat", "avro", "valueSchemaSubject", "s").valueFormat;
    assertEquals("s", avro.subject);
    // The source's schema is made from these before the rest is checked.
    assertEquals("t-value", RaylogOptions.valueFormat(opts("subscribe", "t", "valueFormat",
        "avro")).subject);
  }

  public static void testBadValueFormatsRefused() {
    batchRefused("'valueFormat' must be 'binary' (the default) or 'avro', got 'json'",
        "subscribe", "t", "valueFormat", "json");
    batchRefused("'valueSchemaSubject' applies to valueFormat 'avro' only", "subscribe", "t",
        "valueSchemaSubject", "s");
    streamRefused("needs option 'valueSchemaSubject' or 'valueSchema'", "subscribe", "a, b",
        "valueFormat", "avro");
    batchRefused("needs option 'valueSchemaSubject' or 'valueSchema'", "subscribePattern", "t.*",
        "valueFormat", "avro");
    batchRefused("one of the following options must be specified", "valueFormat", "avro");
    batchRefused("cannot go with 'valueSchemaSubject'", "subscribe", "t", "valueFormat", "avro",
        "valueSchema", "\"long\"", "valueSchemaSubject", "s");
    batchRefused("'valueSchema' is empty", "subscribe", "t", "valueFormat", "avro",
        "valueSchema", " ");
    for (String version : new String[] {"0", "-1", "x", "2147483648", "1.5"}) {
      batchRefused("'valueSchemaVersion' must be 'latest' or a version number from 1, got '"
          + version + "'", "subscribe", "t", "valueFormat", "avro", "valueSchemaVersion",
          version);
    }
    assertEquals("2147483647", batch("subscribe", "t", "valueFormat", "avro",
        "valueSchemaVersion", "2147483647").valueFormat.version);
    batchRefused("'valueFormatErrors' must be 'fail' (the default) or 'null', got 'skip'",
        "subscribe", "t", "valueFormat", "avro", "valueFormatErrors", "skip");
  }

  public static void testNullValuesAreUnset() {
    Map<String, String> o = opts("subscribe", "t");
    o.put("assign", null);
    o.put("startingOffsets", null);
    RaylogOptions parsed = RaylogOptions.forBatch(o);
    assertEquals(RaylogOptions.SubscriptionKind.SUBSCRIBE, parsed.subscription);
    assertEquals(Bound.EARLIEST, parsed.starting);
  }

  public static void testStartingWords() {
    assertEquals(Bound.EARLIEST, batch("subscribe", "t", "startingOffsets", "earliest").starting);
    assertEquals(Bound.EARLIEST, batch("subscribe", "t", "startingOffsets", " Earliest ")
        .starting);
    assertEquals(Bound.EARLIEST, stream("subscribe", "t", "startingOffsets", "earliest")
        .starting);
    assertEquals(Bound.LATEST, stream("subscribe", "t", "startingOffsets", "LATEST").starting);
  }

  public static void testBatchStartingLatestRefused() {
    batchRefused("starting offset can't be latest for batch queries on raylog",
        "subscribe", "t", "startingOffsets", "latest");
    batchRefused("starting offset can't be latest", "subscribe", "t", "startingOffsets",
        " Latest");
    batchRefused("startingOffsets for t-1 can't be latest (-1) for batch queries",
        "subscribe", "t", "startingOffsets", "{\"t\":{\"0\":-2,\"1\":-1}}");
  }

  public static void testBatchEndingEarliestRefused() {
    batchRefused("ending offset can't be earliest for batch queries on raylog",
        "subscribe", "t", "endingOffsets", "earliest");
    batchRefused("endingOffsets for t-0 can't be earliest (-2) for batch queries",
        "subscribe", "t", "endingOffsets", "{\"t\":{\"0\":-2}}");
  }

  public static void testBatchOffsetsJson() {
    RaylogOptions o = batch("subscribe", "t", "startingOffsets", "{\"t\":{\"0\":-2,\"1\":5}}",
        "endingOffsets", "{\"t\":{\"0\":-1,\"1\":9}}");
    assertEquals(Bound.Kind.OFFSETS, o.starting.kind);
    assertEquals(-2L, o.starting.values.get(tp("t", 0)));
    assertEquals(5L, o.starting.values.get(tp("t", 1)));
    assertEquals(Bound.Kind.OFFSETS, o.ending.kind);
    assertEquals(-1L, o.ending.values.get(tp("t", 0)));
    assertEquals(9L, o.ending.values.get(tp("t", 1)));
    assertEquals(Bound.LATEST, batch("subscribe", "t", "endingOffsets", "latest").ending);
    assertEquals(null, o.starting.timestampFor(tp("t", 0)), "offsets need no timestamp lookup");
  }

  public static void testOffsetsBelowEarliestRefused() {
    batchRefused("startingOffsets for t-0 is -3: use an offset >= 0, -2 (earliest) or -1 "
        + "(latest)", "subscribe", "t", "startingOffsets", "{\"t\":{\"0\":-3}}");
    batchRefused("endingOffsets for t-0 is -5", "subscribe", "t", "endingOffsets",
        "{\"t\":{\"0\":-5}}");
    streamRefused("startingOffsets for t-0 is -3", "subscribe", "t", "startingOffsets",
        "{\"t\":{\"0\":-3}}");
  }

  public static void testBadOffsetsJsonRefused() {
    batchRefused("option 'startingOffsets'", "subscribe", "t", "startingOffsets", "first");
    batchRefused("option 'endingOffsets'", "subscribe", "t", "endingOffsets", "{\"t\":[1]}");
  }

  public static void testStreamingStartingAcceptsLatestAndEarliestOffsets() {
    RaylogOptions o = stream("subscribe", "t", "startingOffsets", "{\"t\":{\"0\":-1,\"1\":-2}}");
    assertEquals(-1L, o.starting.values.get(tp("t", 0)));
    assertEquals(-2L, o.starting.values.get(tp("t", 1)));
  }

  public static void testStreamingRefusesEndingOptions() {
    // As Spark's Kafka source: a stream has no end, so any ending option is an error.
    streamRefused("Option 'endingOffsets' is not valid in streaming queries",
        "subscribe", "t", "endingOffsets", "latest");
    streamRefused("Option 'endingOffsets' is not valid in streaming queries",
        "subscribe", "t", "EndingOffsets", "{\"t\":{\"0\":5}}");
    streamRefused("Option 'endingTimestamp' is not valid in streaming queries",
        "subscribe", "t", "endingTimestamp", "1000");
    streamRefused("Option 'endingOffsetsByTimestamp' is not valid in streaming queries",
        "subscribe", "t", "endingOffsetsByTimestamp", "{\"t\":{\"0\":1000}}");
  }

  public static void testStartingTimestamp() {
    RaylogOptions o = batch("subscribe", "t", "startingTimestamp", " 1000 ");
    assertEquals(Bound.Kind.TIMESTAMP, o.starting.kind);
    assertEquals(1000L, o.starting.timestamp);
    assertEquals(1000L, o.starting.timestampFor(tp("t", 0)));
    assertEquals(1000L, o.starting.timestampFor(tp("other", 7)));
    assertEquals(0L, batch("subscribe", "t", "startingTimestamp", "0").starting.timestamp);
    assertEquals(Bound.Kind.TIMESTAMP,
        stream("subscribe", "t", "startingTimestamp", "5").starting.kind);
    for (String bad : new String[] {"-1", "abc", "1.5", "", "1e3"}) {
      batchRefused("Option 'startingTimestamp' must be a timestamp in milliseconds since the "
          + "epoch (>= 0), got '" + bad.trim() + "'", "subscribe", "t", "startingTimestamp", bad);
    }
  }

  public static void testStartingOffsetsByTimestamp() {
    RaylogOptions o = batch("subscribe", "t", "startingOffsetsByTimestamp",
        "{\"t\":{\"0\":1000,\"1\":2000}}");
    assertEquals(Bound.Kind.TIMESTAMPS, o.starting.kind);
    assertEquals(1000L, o.starting.timestampFor(tp("t", 0)));
    assertEquals(2000L, o.starting.timestampFor(tp("t", 1)));
    assertEquals(null, o.starting.timestampFor(tp("t", 2)));
    batchRefused("Option 'startingOffsetsByTimestamp': the timestamp of t-0 is negative (-1)",
        "subscribe", "t", "startingOffsetsByTimestamp", "{\"t\":{\"0\":-1}}");
    batchRefused("option 'startingOffsetsByTimestamp'", "subscribe", "t",
        "startingOffsetsByTimestamp", "1000");
  }

  public static void testEndingTimestamps() {
    RaylogOptions o = batch("subscribe", "t", "endingTimestamp", "5000");
    assertEquals(Bound.Kind.TIMESTAMP, o.ending.kind);
    assertEquals(5000L, o.ending.timestamp);
    RaylogOptions by = batch("subscribe", "t", "endingOffsetsByTimestamp", "{\"t\":{\"0\":7}}");
    assertEquals(Bound.Kind.TIMESTAMPS, by.ending.kind);
    assertEquals(7L, by.ending.timestampFor(tp("t", 0)));
    batchRefused("Option 'endingTimestamp' must be a timestamp", "subscribe", "t",
        "endingTimestamp", "-5");
    batchRefused("the timestamp of t-0 is negative", "subscribe", "t",
        "endingOffsetsByTimestamp", "{\"t\":{\"0\":-2}}");
  }

  public static void testTimestampPrecedence() {
    // Spark's: one timestamp, then timestamps by partition, then offsets. Options of lower
    // precedence are not looked at, as in Spark (a batch "latest" then is no error).
    RaylogOptions all = batch("subscribe", "t", "startingTimestamp", "10",
        "startingOffsetsByTimestamp", "{\"t\":{\"0\":20}}", "startingOffsets", "latest");
    assertEquals(Bound.Kind.TIMESTAMP, all.starting.kind);
    assertEquals(10L, all.starting.timestamp);
    RaylogOptions two = batch("subscribe", "t", "startingOffsetsByTimestamp",
        "{\"t\":{\"0\":20}}", "startingOffsets", "{\"t\":{\"0\":3}}");
    assertEquals(Bound.Kind.TIMESTAMPS, two.starting.kind);
    RaylogOptions ends = batch("subscribe", "t", "endingTimestamp", "10",
        "endingOffsetsByTimestamp", "{\"t\":{\"0\":20}}", "endingOffsets", "earliest");
    assertEquals(Bound.Kind.TIMESTAMP, ends.ending.kind);
  }

  public static void testStartingOffsetsByTimestampStrategy() {
    assertFalse(batch("subscribe", "t").startingLatestIfNoTimestampMatch, "default error");
    assertFalse(batch("subscribe", "t", "startingOffsetsByTimestampStrategy", "error")
        .startingLatestIfNoTimestampMatch, "error");
    assertFalse(batch("subscribe", "t", "startingOffsetsByTimestampStrategy", " ERROR ")
        .startingLatestIfNoTimestampMatch, "ERROR");
    assertTrue(batch("subscribe", "t", "startingOffsetsByTimestampStrategy", "latest")
        .startingLatestIfNoTimestampMatch, "latest");
    assertTrue(stream("subscribe", "t", "startingOffsetsByTimestampStrategy", "LATEST")
        .startingLatestIfNoTimestampMatch, "LATEST");
    batchRefused("Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'",
        "subscribe", "t", "startingOffsetsByTimestampStrategy", "earliest");
  }

  public static void testBooleans() {
    assertTrue(batch("subscribe", "t", "includeHeaders", "true").includeHeaders, "true");
    assertTrue(batch("subscribe", "t", "includeHeaders", " TRUE ").includeHeaders, "TRUE");
    assertFalse(batch("subscribe", "t", "includeHeaders", "false").includeHeaders, "false");
    assertFalse(batch("subscribe", "t", "failOnDataLoss", "False").failOnDataLoss, "False");
    assertTrue(batch("subscribe", "t", "failOnDataLoss", "true").failOnDataLoss, "true");
    assertFalse(RaylogOptions.includeHeaders(opts()), "includeHeaders default");
    assertTrue(RaylogOptions.includeHeaders(opts("includeHeaders", "true")), "includeHeaders");
  }

  public static void testBadBooleansRefused() {
    for (String bad : new String[] {"yes", "1", "", "t", "truee"}) {
      batchRefused("Option 'includeHeaders' must be true or false, got '" + bad + "'",
          "subscribe", "t", "includeHeaders", bad);
      streamRefused("Option 'failOnDataLoss' must be true or false, got '" + bad + "'",
          "subscribe", "t", "failOnDataLoss", bad);
      assertThrows(IllegalArgumentException.class,
          () -> RaylogOptions.includeHeaders(opts("includeHeaders", bad)), "must be true or false");
    }
  }

  public static void testPositiveIntegers() {
    assertEquals(1, batch("subscribe", "t", "minPartitions", "1").minPartitions);
    assertEquals(Integer.MAX_VALUE,
        batch("subscribe", "t", "minPartitions", "2147483647").minPartitions);
    assertEquals(10L, stream("subscribe", "t", "maxOffsetsPerTrigger", " 10 ")
        .maxOffsetsPerTrigger);
    assertEquals(Long.MAX_VALUE, stream("subscribe", "t", "maxOffsetsPerTrigger",
        "9223372036854775807").maxOffsetsPerTrigger);
    assertEquals(3L, batch("subscribe", "t", "maxRecordsPerPartition", "3")
        .maxRecordsPerPartition);
    assertEquals(Long.MAX_VALUE, batch("subscribe", "t", "maxRecordsPerPartition",
        "9223372036854775807").maxRecordsPerPartition);
    assertEquals(1L, batch("subscribe", "t", "fetchTimeoutMs", "1").fetchTimeoutMs);
  }

  public static void testNonPositiveIntegersRefused() {
    for (String bad : new String[] {"0", "-1", "abc", "1.5", "", "1e3"}) {
      batchRefused("Option 'minPartitions' must be a positive integer (at most 2147483647), "
          + "got '" + bad + "'", "subscribe", "t", "minPartitions", bad);
      streamRefused("Option 'maxOffsetsPerTrigger' must be a positive integer",
          "subscribe", "t", "maxOffsetsPerTrigger", bad);
      batchRefused("Option 'maxRecordsPerPartition' must be a positive integer",
          "subscribe", "t", "maxRecordsPerPartition", bad);
      batchRefused("Option 'fetchTimeoutMs' must be a positive integer",
          "subscribe", "t", "fetchTimeoutMs", bad);
    }
    batchRefused("Option 'minPartitions' must be a positive integer", "subscribe", "t",
        "minPartitions", "2147483648");
    streamRefused("Option 'maxOffsetsPerTrigger' must be a positive integer", "subscribe", "t",
        "maxOffsetsPerTrigger", "9223372036854775808");
  }

  public static void testProducerSettings() {
    assertEquals("{\"linger_ms\":5}",
        RaylogOptions.producerSettings(opts("producer.linger.ms", "5")));
    String json = RaylogOptions.producerSettings(opts("producer.acks", "all",
        "Producer.Enable.Idempotence", "TRUE", "PRODUCER.batch.size", " 16384 ",
        "producer.retries", "-1", "producer.compression", "false", "subscribe", "t",
        "kafka.linger.ms", "9", "topic", "out"));
    // Keys in order, lower case, dots as underscores; numbers and booleans typed.
    assertEquals("{\"acks\":\"all\",\"batch_size\":16384,\"compression\":false,"
        + "\"enable_idempotence\":true,\"retries\":-1}", json);
  }

  public static void testProducerSettingsTypedValues() {
    // Decimals are numbers too; anything else stays a string (JSON-escaped).
    assertEquals("{\"client_id\":\"a \\\"b\\\"\",\"ratio\":1.5,\"version\":\"1.2.3\"}",
        RaylogOptions.producerSettings(opts("producer.client.id", "a \"b\"", "producer.ratio",
            "1.5", "producer.version", "1.2.3")));
  }

  public static void testNoProducerSettingsIsEmpty() {
    assertEquals("", RaylogOptions.producerSettings(opts()));
    assertEquals("", RaylogOptions.producerSettings(opts("topic", "t", "kafka.acks", "all")));
  }

  public static void testSinkTopic() {
    assertEquals(null, RaylogOptions.sinkTopic(opts()));
    assertEquals("out", RaylogOptions.sinkTopic(opts("topic", "out")));
    assertEquals("out", RaylogOptions.sinkTopic(opts("TOPIC", " out ")));
    assertThrows(IllegalArgumentException.class,
        () -> RaylogOptions.sinkTopic(opts("topic", "  ")), "Option 'topic' is empty");
    assertThrows(IllegalArgumentException.class,
        () -> RaylogOptions.sinkTopic(opts("Topic", "")), "Option 'topic' is empty");
  }

  public static void testToString() {
    assertEquals("subscribe [a, b] from earliest to latest",
        batch("subscribe", "a,b").toString());
    assertEquals("assign [t-0] from {\"t\":{\"0\":4}} to timestamp 9",
        batch("assign", "{\"t\":[0]}", "startingOffsets", "{\"t\":{\"0\":4}}",
            "endingTimestamp", "9").toString());
  }

  public static void testSerializable() throws Exception {
    // The options travel with Spark's plan; they must survive Java serialization.
    RaylogOptions o = batch("assign", "{\"t\":[0,1]}", "startingOffsetsByTimestamp",
        "{\"t\":{\"0\":1,\"1\":2}}", "minPartitions", "3");
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(o);
    }
    RaylogOptions back;
    try (ObjectInputStream in =
        new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
      back = (RaylogOptions) in.readObject();
    }
    assertEquals(o.toString(), back.toString());
    assertEquals(new TreeMap<>(o.starting.values), new TreeMap<>(back.starting.values));
    assertEquals(3, back.minPartitions);
  }

  public static void testIsolationLevel() {
    assertEquals("read_uncommitted", batch("subscribe", "t").isolation);
    assertFalse(batch("subscribe", "t").readCommitted(), "default");
    // Spark's Kafka source spelling, and raylog's own, in any case.
    assertTrue(batch("subscribe", "t", "kafka.isolation.level", "read_committed")
        .readCommitted(), "kafka.isolation.level");
    assertTrue(stream("subscribe", "t", "Kafka.Isolation.Level", "READ_COMMITTED")
        .readCommitted(), "any case");
    assertTrue(batch("subscribe", "t", "isolationLevel", "read_committed").readCommitted(),
        "isolationLevel");
    assertTrue(batch("subscribe", "t", "isolation.level", "read_committed").readCommitted(),
        "isolation.level");
    assertFalse(batch("subscribe", "t", "kafka.isolation.level", "read_uncommitted",
        "isolationLevel", "read_uncommitted").readCommitted(), "both, agreeing");
    batchRefused("'isolationLevel' must be 'read_uncommitted' (the default) or "
        + "'read_committed'", "subscribe", "t", "isolationLevel", "committed");
    batchRefused("one setting", "subscribe", "t", "kafka.isolation.level", "read_committed",
        "isolationLevel", "read_uncommitted");
  }

  public static void testCommittedOffsets() {
    PartitionOffsets o = new PartitionOffsets(2, 10, null, 100, 7);
    assertEquals(10L, o.latest);
    assertEquals(7L, o.committed().latest);
    assertEquals(2L, o.committed().logStart);
    assertEquals(10L, new PartitionOffsets(2, 10, null, 100).lastStable);
  }

  public static void testSinkTransactionalId() {
    assertEquals(null, RaylogOptions.sinkTransactionalId(opts("topic", "t")));
    assertEquals("w", RaylogOptions.sinkTransactionalId(opts("transactional.id", " w ")));
    assertEquals("w", RaylogOptions.sinkTransactionalId(opts("transactionalId", "w")));
    assertThrows(IllegalArgumentException.class,
        () -> RaylogOptions.sinkTransactionalId(opts("Transactional.Id", " ")),
        "Option 'transactional.id' is empty");
  }
}
