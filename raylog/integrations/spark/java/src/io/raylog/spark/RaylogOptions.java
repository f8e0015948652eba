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
  public static final String VALUE_FORMAT = "valueformat";
  public static final String VALUE_SCHEMA = "valueschema";
  public static final String VALUE_SCHEMA_SUBJECT = "valueschemasubject";
  public static final String VALUE_SCHEMA_VERSION = "valueschemaversion";
  public static final String VALUE_FORMAT_ERRORS = "valueformaterrors";
  public static final String TIERED_PLAN = "tieredplan";
  public static final String PRODUCER_PREFIX = "producer.";
  /** Spark's Kafka source spells it as the consumer's setting; the others are raylog's. */
  public static final String[] ISOLATION_LEVEL = {"kafka.isolation.level", "isolation.level",
      "isolationlevel"};
  public static final String READ_COMMITTED = "read_committed";
  public static final String READ_UNCOMMITTED = "read_uncommitted";

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
  public final ValueFormat valueFormat;
  /** read_committed: ranges end at the last stable offset and aborted transactions' records
   * are left out by the broker; read_uncommitted (the default): up to the high watermark. */
  public final String isolation;
  /** The cold pieces of the ranges, planned by the Python side (raylog.integrations.spark
   * .read passes them); null: the planner asks for them. */
  public final String tieredPlan;

  /**
   * How a read's {@code value} column comes: the stored bytes ({@code valueFormat} binary, the
   * default), or ({@code avro}) values in Confluent's wire format decoded into the type of one
   * reader schema, given inline ({@code valueSchema}) or the registry's {@code version}
   * (latest by default) of {@code subject} ({@code <topic>-value} when one topic is read).
   */
  public static final class ValueFormat implements Serializable {
    private static final long serialVersionUID = 1L;

    public final boolean avro;
    public final String schema; // the reader schema given inline, or null
    public final String subject; // else the registry's subject and version
    public final String version; // "latest" or a number
    public final boolean errorsAsNull; // values not in the wire format or of unknown ids

    ValueFormat(boolean avro, String schema, String subject, String version,
        boolean errorsAsNull) {
      this.avro = avro;
      this.schema = schema;
      this.subject = subject;
      this.version = version;
      this.errorsAsNull = errorsAsNull;
    }
  }

  private RaylogOptions(Map<String, String> o, boolean streaming) {
    checkOneSubscription(o);
    String subscribe = o.get(SUBSCRIBE);
    String pattern = o.get(SUBSCRIBE_PATTERN);
    String assign = o.get(ASSIGN);
    List<String> names = new ArrayList<>();
    List<TopicPartition> partitions = Collections.emptyList();
    SubscriptionKind kind;
    if (subscribe != null) {
      kind = SubscriptionKind.SUBSCRIBE;
      names = topicList(subscribe);
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
    this.valueFormat = valueFormat(o);

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
    this.isolation = isolation(o);
    this.tieredPlan = o.get(TIERED_PLAN);
  }

  /** Whether a read leaves out what transactions have not committed. */
  public boolean readCommitted() {
    return isolation.equals(READ_COMMITTED);
  }

  /** The isolation level of a read: one value, under any of its spellings. */
  private static String isolation(Map<String, String> o) {
    String level = null;
    for (String key : ISOLATION_LEVEL) {
      String value = o.get(key);
      if (value == null) {
        continue;
      }
      value = value.trim().toLowerCase(Locale.ROOT);
      if (!value.equals(READ_COMMITTED) && !value.equals(READ_UNCOMMITTED)) {
        throw new IllegalArgumentException("Option '" + display(key) + "' must be "
            + "'read_uncommitted' (the default) or 'read_committed', got '" + o.get(key) + "'");
      }
      if (level != null && !level.equals(value)) {
        throw new IllegalArgumentException("Options 'kafka.isolation.level', "
            + "'isolation.level' and 'isolationLevel' are one setting, given '" + level
            + "' and '" + value + "'");
      }
      level = value;
    }
    return level == null ? READ_UNCOMMITTED : level;
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

  /** The value format of a read, checked; the source's schema depends on it, so it is known
   * before the rest of the options are checked. */
  public static ValueFormat valueFormat(Map<String, String> options) {
    Map<String, String> o = lowerKeys(options);
    String format = o.getOrDefault(VALUE_FORMAT, "binary").trim().toLowerCase(Locale.ROOT);
    if (!format.equals("binary") && !format.equals("avro")) {
      throw new IllegalArgumentException("Option 'valueFormat' must be 'binary' (the default) "
          + "or 'avro', got '" + o.get(VALUE_FORMAT) + "'");
    }
    boolean avro = format.equals("avro");
    for (String key : Arrays.asList(VALUE_SCHEMA, VALUE_SCHEMA_SUBJECT, VALUE_SCHEMA_VERSION,
        VALUE_FORMAT_ERRORS)) {
      if (!avro && o.containsKey(key)) {
        throw new IllegalArgumentException("Option '" + display(key) + "' applies to "
            + "valueFormat 'avro' only");
      }
    }
    String schema = o.get(VALUE_SCHEMA);
    if (schema != null && (o.containsKey(VALUE_SCHEMA_SUBJECT)
        || o.containsKey(VALUE_SCHEMA_VERSION))) {
      throw new IllegalArgumentException("Option 'valueSchema' gives the reader schema itself: "
          + "it cannot go with 'valueSchemaSubject' or 'valueSchemaVersion', which name one in "
          + "the schema registry");
    }
    if (schema != null && schema.trim().isEmpty()) {
      throw new IllegalArgumentException("Option 'valueSchema' is empty");
    }
    String subject = o.get(VALUE_SCHEMA_SUBJECT);
    if (subject != null && subject.trim().isEmpty()) {
      throw new IllegalArgumentException("Option 'valueSchemaSubject' is empty");
    }
    if (avro && schema == null && subject == null) {
      checkOneSubscription(o);
      List<String> topics = o.containsKey(SUBSCRIBE_PATTERN) ? null
          : o.containsKey(SUBSCRIBE) ? topicList(o.get(SUBSCRIBE))
          : o.containsKey(ASSIGN) ? topicsOf(OffsetsJson.parseAssign(o.get(ASSIGN))) : null;
      if (topics == null || topics.size() != 1) {
        throw new IllegalArgumentException("valueFormat 'avro' reads every topic of a query "
            + "with one reader schema: reading several topics, or a subscribePattern, needs "
            + "option 'valueSchemaSubject' or 'valueSchema' (the default subject is "
            + "<topic>-value when one topic is read)");
      }
      subject = topics.get(0) + "-value";
    }
    String version = o.getOrDefault(VALUE_SCHEMA_VERSION, "latest").trim()
        .toLowerCase(Locale.ROOT);
    if (!version.equals("latest") && !version.matches("[1-9]\\d{0,9}")
        || version.length() == 10 && Long.parseLong(version) > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("Option 'valueSchemaVersion' must be 'latest' or a "
          + "version number from 1, got '" + o.get(VALUE_SCHEMA_VERSION) + "'");
    }
    String errors = o.getOrDefault(VALUE_FORMAT_ERRORS, "fail").trim().toLowerCase(Locale.ROOT);
    if (!errors.equals("fail") && !errors.equals("null")) {
      throw new IllegalArgumentException("Option 'valueFormatErrors' must be 'fail' (the "
          + "default) or 'null', got '" + o.get(VALUE_FORMAT_ERRORS) + "'");
    }
    return new ValueFormat(avro, schema, subject == null ? null : subject.trim(), version,
        errors.equals("null"));
  }

  private static void checkOneSubscription(Map<String, String> o) {
    int given = (o.containsKey(SUBSCRIBE) ? 1 : 0) + (o.containsKey(SUBSCRIBE_PATTERN) ? 1 : 0)
        + (o.containsKey(ASSIGN) ? 1 : 0);
    if (given == 0) {
      throw new IllegalArgumentException("One of the following options must be specified for "
          + "the raylog source: subscribe, subscribePattern, assign.");
    }
    if (given > 1) {
      throw new IllegalArgumentException("Only one of the following options can be specified "
          + "for the raylog source: subscribe, subscribePattern, assign. Given: " + o.keySet());
    }
  }

  private static List<String> topicList(String subscribe) {
    List<String> names = new ArrayList<>();
    for (String name : subscribe.split(",")) {
      if (!name.trim().isEmpty() && !names.contains(name.trim())) {
        names.add(name.trim());
      }
    }
    return names;
  }

  private static List<String> topicsOf(List<TopicPartition> partitions) {
    List<String> names = new ArrayList<>();
    for (TopicPartition tp : partitions) {
      if (!names.contains(tp.topic)) {
        names.add(tp.topic);
      }
    }
    return names;
  }

  /** The sink's transactional id ({@code transactional.id} or {@code transactionalId}): a
   * batch write's tasks write in transactions {@code <id>-<partition>} that the driver
   * commits once all succeeded; null when not set (at least once). */
  public static String sinkTransactionalId(Map<String, String> options) {
    Map<String, String> o = lowerKeys(options);
    String id = o.containsKey("transactional.id") ? o.get("transactional.id")
        : o.get("transactionalid");
    if (id != null && id.trim().isEmpty()) {
      throw new IllegalArgumentException("Option 'transactional.id' is empty");
    }
    return id == null ? null : id.trim();
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
      "maxRecordsPerPartition", "maxOffsetsPerTrigger", "fetchTimeoutMs", "topic", "valueFormat",
      "valueSchema", "valueSchemaSubject", "valueSchemaVersion", "valueFormatErrors",
      "isolationLevel", "tieredPlan"};

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
