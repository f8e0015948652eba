package io.raylog.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * The options of {@code format("raylog")}, checked: the names and meanings of Spark's Kafka
 * source and sink (option names are case-insensitive, as Spark's are). Options starting with
 * {@code kafka.} are accepted and ignored, so Kafka code ports unchanged; producer settings of
 * the sink go in {@code producer.<raylog setting>} (e.g. {@code producer.acks}).
 */
public final class RaylogOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  public static final String SUBSCRIBE = "subscribe";
  public static final String SUBSCRIBE_PATTERN = "subscribepattern";
  public static final String ASSIGN = "assign";
  public static final String STARTING_OFFSETS = "startingoffsets";
  public static final String ENDING_OFFSETS = "endingoffsets";
  public static final String STARTING_TIMESTAMP = "startingtimestamp";
  public static final String ENDING_TIMESTAMP = "endingtimestamp";
  public static final String STARTING_BY_TIMESTAMP = "startingoffsetsbytimestamp";
  public static final String ENDING_BY_TIMESTAMP = "endingoffsetsbytimestamp";
  public static final String STARTING_TIMESTAMP_STRATEGY = "startingoffsetsbytimestampstrategy";
  public static final String INCLUDE_HEADERS = "includeheaders";
  public static final String FAIL_ON_DATA_LOSS = "failondataloss";
  public static final String MIN_PARTITIONS = "minpartitions";
  public static final String MAX_RECORDS_PER_PARTITION = "maxrecordsperpartition";
  public static final String MAX_OFFSETS_PER_TRIGGER = "maxoffsetspertrigger";
  public static final String FETCH_TIMEOUT_MS = "fetchtimeoutms";
  public static final String TOPIC = "topic";
  public static final String PRODUCER_PREFIX = "producer.";

  /** Which partitions a query reads. */
  public enum SubscriptionKind { SUBSCRIBE, PATTERN, ASSIGN }

  public final SubscriptionKind subscription;
  public final List<String> topics; // SUBSCRIBE
  public final String pattern; // PATTERN
  public final List<TopicPartition> assigned; // ASSIGN
  public final Bound starting;
  public final Bound ending;
  public final boolean startingLatestIfNoTimestampMatch;
  public final boolean includeHeaders;
  public final boolean failOnDataLoss;
  public final Integer minPartitions;
  public final Long maxRecordsPerPartition;
  public final Long maxOffsetsPerTrigger;
  public final long fetchTimeoutMs;

  private RaylogOptions(Map<String, String> o, boolean streaming) {
    if (o.containsKey("valueformat")) {
      // Spark's from_avro is in the spark-avro module, whose jar is not installed here.
      throw new IllegalArgumentException("Option 'valueFormat' is not supported by the raylog "
          + "source (Spark's Avro support, spark-avro, is not installed): read Avro values as "
          + "typed columns with raylog.spark.read(spark, topic, value_format=\"avro\")");
    }
    String subscribe = o.get(SUBSCRIBE);
    String pattern = o.get(SUBSCRIBE_PATTERN);
    String assign = o.get(ASSIGN);
    int given = (subscribe != null ? 1 : 0) + (pattern != null ? 1 : 0) + (assign != null ? 1 : 0);
    if (given == 0) {
      throw new IllegalArgumentException("One of the following options must be specified for "
          + "the raylog source: subscribe, subscribePattern, assign.");
    }
    if (given > 1) {
      throw new IllegalArgumentException("Only one of the following options can be specified "
          + "for the raylog source: subscribe, subscribePattern, assign. Given: " + o.keySet());
    }
    List<String> names = new ArrayList<>();
    List<TopicPartition> partitions = Collections.emptyList();
    SubscriptionKind kind;
    if (subscribe != null) {
      kind = SubscriptionKind.SUBSCRIBE;
      for (String name : subscribe.split(",")) {
        if (!name.trim().isEmpty() && !names.contains(name.trim())) {
          names.add(name.trim());
        }
      }
      if (names.isEmpty()) {
        throw new IllegalArgumentException("No topics to subscribe to as specified value for "
            + "option 'subscribe' is '" + subscribe + "'");
      }
    } else if (pattern != null) {
      kind = SubscriptionKind.PATTERN;
      if (pattern.trim().isEmpty()) {
        throw new IllegalArgumentException("Pattern to subscribe is empty as specified value "
            + "for option 'subscribePattern' is '" + pattern + "'");
      }
      try {
        Pattern.compile(pattern);
      } catch (PatternSyntaxException e) {
        throw new IllegalArgumentException(
            "Option 'subscribePattern' is not a regular expression: " + e.getMessage());
      }
    } else {
      kind = SubscriptionKind.ASSIGN;
      partitions = OffsetsJson.parseAssign(assign);
    }
    this.subscription = kind;
    this.topics = Collections.unmodifiableList(names);
    this.pattern = pattern;
    this.assigned = Collections.unmodifiableList(partitions);

    this.starting = bound(o, true, streaming);
    this.ending = bound(o, false, streaming);
    String strategy = o.getOrDefault(STARTING_TIMESTAMP_STRATEGY, "error").trim()
        .toLowerCase(Locale.ROOT);
    if (!strategy.equals("error") && !strategy.equals("latest")) {
      throw new IllegalArgumentException("Option 'startingOffsetsByTimestampStrategy' must be "
          + "'error' or 'latest', got '" + o.get(STARTING_TIMESTAMP_STRATEGY) + "'");
    }
    this.startingLatestIfNoTimestampMatch = strategy.equals("latest");
    this.includeHeaders = bool(o, INCLUDE_HEADERS, false);
    this.failOnDataLoss = bool(o, FAIL_ON_DATA_LOSS, true);
    Long minParts = positive(o, MIN_PARTITIONS, Integer.MAX_VALUE);
    this.minPartitions = minParts == null ? null : minParts.intValue();
    this.maxRecordsPerPartition = positive(o, MAX_RECORDS_PER_PARTITION, Long.MAX_VALUE);
    this.maxOffsetsPerTrigger = positive(o, MAX_OFFSETS_PER_TRIGGER, Long.MAX_VALUE);
    Long timeout = positive(o, FETCH_TIMEOUT_MS, Long.MAX_VALUE);
    this.fetchTimeoutMs = timeout == null ? 120_000L : timeout;
  }

  @Override
  public String toString() {
    String read = subscription == SubscriptionKind.SUBSCRIBE ? "subscribe " + topics
        : subscription == SubscriptionKind.PATTERN ? "subscribePattern " + pattern
        : "assign " + assigned;
    return read + " from " + starting + " to " + ending;
  }

  /** The options of a batch read ({@code spark.read}). */
  public static RaylogOptions forBatch(Map<String, String> options) {
    return new RaylogOptions(lowerKeys(options), false);
  }

  /** The options of a streaming read ({@code spark.readStream}). */
  public static RaylogOptions forStreaming(Map<String, String> options) {
    return new RaylogOptions(lowerKeys(options), true);
  }

  /** Whether the source's schema has a {@code headers} column (the schema is known before
   * the rest of the options are checked). */
  public static boolean includeHeaders(Map<String, String> options) {
    return bool(lowerKeys(options), INCLUDE_HEADERS, false);
  }

  /** The sink's default topic: the {@code topic} option, null when not set. */
  public static String sinkTopic(Map<String, String> options) {
    String topic = lowerKeys(options).get(TOPIC);
    if (topic != null && topic.trim().isEmpty()) {
      throw new IllegalArgumentException("Option 'topic' is empty");
    }
    return topic == null ? null : topic.trim();
  }

  /** The sink's producer settings ({@code producer.*} options) as a JSON object, numbers and
   * booleans as such; {@code producer.linger.ms} is the setting {@code linger_ms}. */
  public static String producerSettings(Map<String, String> options) {
    Map<String, Object> settings = new TreeMap<>();
    for (Map.Entry<String, String> e : lowerKeys(options).entrySet()) {
      if (e.getKey().startsWith(PRODUCER_PREFIX)) {
        String value = e.getValue().trim();
        Object typed = value;
        if (value.equalsIgnoreCase("true") || value.equalsIgnoreCase("false")) {
          typed = Boolean.parseBoolean(value);
        } else if (value.matches("-?\\d{1,18}")) {
          typed = Long.parseLong(value);
        } else if (value.matches("-?\\d+\\.\\d+([eE]-?\\d+)?")) {
          typed = Double.parseDouble(value);
        }
        settings.put(e.getKey().substring(PRODUCER_PREFIX.length()).replace('.', '_'), typed);
      }
    }
    try {
      return settings.isEmpty() ? "" : OffsetsJson.MAPPER.writeValueAsString(settings);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  private static final String[] NAMES = {"subscribe", "subscribePattern", "assign",
      "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
      "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
      "startingOffsetsByTimestampStrategy", "includeHeaders", "failOnDataLoss", "minPartitions",
      "maxRecordsPerPartition", "maxOffsetsPerTrigger", "fetchTimeoutMs", "topic"};

  /** An option's name as the documentation spells it (keys are matched ignoring case). */
  static String display(String key) {
    for (String name : NAMES) {
      if (name.toLowerCase(Locale.ROOT).equals(key)) {
        return name;
      }
    }
    return key;
  }

  static Map<String, String> lowerKeys(Map<String, String> options) {
    Map<String, String> out = new HashMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (e.getValue() != null) {
        out.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
      }
    }
    return out;
  }

  private static Bound bound(Map<String, String> o, boolean start, boolean streaming) {
    String which = start ? "starting" : "ending";
    String globalKey = start ? STARTING_TIMESTAMP : ENDING_TIMESTAMP;
    String byTimestampKey = start ? STARTING_BY_TIMESTAMP : ENDING_BY_TIMESTAMP;
    String offsetsKey = start ? STARTING_OFFSETS : ENDING_OFFSETS;
    if (!start && streaming) {
      for (String key : Arrays.asList(globalKey, byTimestampKey, offsetsKey)) {
        if (o.containsKey(key)) {
          throw new IllegalArgumentException("Option '" + display(key)
              + "' is not valid in streaming queries: a stream has no end");
        }
      }
      return Bound.LATEST;
    }
    // Spark's precedence: one timestamp, then timestamps by partition, then offsets.
    if (o.containsKey(globalKey)) {
      String value = o.get(globalKey).trim();
      try {
        long timestamp = Long.parseLong(value);
        if (timestamp < 0) {
          throw new NumberFormatException();
        }
        return Bound.timestamp(timestamp);
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("Option '" + display(globalKey)
            + "' must be a timestamp in "
            + "milliseconds since the epoch (>= 0), got '" + value + "'");
      }
    }
    if (o.containsKey(byTimestampKey)) {
      SortedMap<TopicPartition, Long> timestamps =
          OffsetsJson.parsePartitionValues(o.get(byTimestampKey), display(byTimestampKey));
      for (Map.Entry<TopicPartition, Long> e : timestamps.entrySet()) {
        if (e.getValue() < 0) {
          throw new IllegalArgumentException("Option '" + display(byTimestampKey)
              + "': the timestamp of "
              + e.getKey() + " is negative (" + e.getValue() + ")");
        }
      }
      return Bound.timestamps(timestamps);
    }
    String value = o.get(offsetsKey);
    if (value == null) {
      return start && !streaming ? Bound.EARLIEST : Bound.LATEST;
    }
    String word = value.trim().toLowerCase(Locale.ROOT);
    if (word.equals("earliest")) {
      if (!start) {
        throw new IllegalArgumentException("ending offset can't be earliest for batch queries "
            + "on raylog");
      }
      return Bound.EARLIEST;
    }
    if (word.equals("latest")) {
      if (start && !streaming) {
        throw new IllegalArgumentException("starting offset can't be latest for batch queries "
            + "on raylog");
      }
      return Bound.LATEST;
    }
    SortedMap<TopicPartition, Long> offsets = OffsetsJson.parsePartitionValues(value,
        display(offsetsKey));
    for (Map.Entry<TopicPartition, Long> e : offsets.entrySet()) {
      long offset = e.getValue();
      if (offset < OffsetsJson.EARLIEST) {
        throw new IllegalArgumentException(which + "Offsets for " + e.getKey() + " is " + offset
            + ": use an offset >= 0, -2 (earliest) or -1 (latest)");
      }
      if (!start && offset == OffsetsJson.EARLIEST) {
        throw new IllegalArgumentException("endingOffsets for " + e.getKey() + " can't be "
            + "earliest (-2) for batch queries on raylog");
      }
      if (start && !streaming && offset == OffsetsJson.LATEST) {
        throw new IllegalArgumentException("startingOffsets for " + e.getKey() + " can't be "
            + "latest (-1) for batch queries on raylog");
      }
    }
    return Bound.offsets(offsets);
  }

  private static boolean bool(Map<String, String> o, String key, boolean byDefault) {
    String value = o.get(key);
    if (value == null) {
      return byDefault;
    }
    String v = value.trim().toLowerCase(Locale.ROOT);
    if (v.equals("true") || v.equals("false")) {
      return Boolean.parseBoolean(v);
    }
    throw new IllegalArgumentException("Option '" + display(key)
        + "' must be true or false, got '" + value + "'");
  }

  private static Long positive(Map<String, String> o, String key, long max) {
    String value = o.get(key);
    if (value == null) {
      return null;
    }
    try {
      long n = Long.parseLong(value.trim());
      if (n >= 1 && n <= max) {
        return n;
      }
    } catch (NumberFormatException ignored) {
      // below
    }
    throw new IllegalArgumentException("Option '" + display(key)
        + "' must be a positive integer (at most " + max + "), got '" + value + "'");
  }
}
