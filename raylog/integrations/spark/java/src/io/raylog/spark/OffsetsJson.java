package io.raylog.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * The JSON shapes of Spark's Kafka source options and offsets: partition offsets (or
 * timestamps) as {@code {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}} and assignments as
 * {@code {"topicA":[0,1],"topicB":[2,4]}}. Offsets {@code -2} and {@code -1} mean earliest
 * and latest where an option allows them.
 */
public final class OffsetsJson {
  public static final long EARLIEST = -2L;
  public static final long LATEST = -1L;

  static final ObjectMapper MAPPER = new ObjectMapper();

  private OffsetsJson() {}

  /** Offsets (or timestamps) by partition; {@code option} names the option in errors. */
  public static SortedMap<TopicPartition, Long> parsePartitionValues(String json, String option) {
    String example = "{\"topicA\":{\"0\":23,\"1\":-1},\"topicB\":{\"0\":-2}}";
    JsonNode root = parse(json, option, example);
    SortedMap<TopicPartition, Long> out = new TreeMap<>();
    if (!root.isObject()) {
      throw badJson(option, json, example, "not a JSON object");
    }
    for (Iterator<Map.Entry<String, JsonNode>> it = root.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> topic = it.next();
      if (!topic.getValue().isObject()) {
        throw badJson(option, json, example, "topic " + topic.getKey() + " maps to no object");
      }
      for (Iterator<Map.Entry<String, JsonNode>> parts = topic.getValue().fields();
          parts.hasNext(); ) {
        Map.Entry<String, JsonNode> part = parts.next();
        int partition = partitionNumber(part.getKey(), option, json, example);
        JsonNode value = part.getValue();
        if (!value.isIntegralNumber() || !value.canConvertToLong()) {
          throw badJson(option, json, example,
              "the value of " + topic.getKey() + "-" + part.getKey() + " is not an integer");
        }
        out.put(new TopicPartition(topic.getKey(), partition), value.asLong());
      }
    }
    return out;
  }

  /** The partitions of an {@code assign} option. */
  public static List<TopicPartition> parseAssign(String json) {
    String example = "{\"topicA\":[0,1],\"topicB\":[2,4]}";
    JsonNode root = parse(json, "assign", example);
    if (!root.isObject()) {
      throw badJson("assign", json, example, "not a JSON object");
    }
    List<TopicPartition> out = new ArrayList<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = root.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> topic = it.next();
      if (!topic.getValue().isArray()) {
        throw badJson("assign", json, example, "topic " + topic.getKey() + " maps to no list");
      }
      for (JsonNode part : topic.getValue()) {
        if (!part.isInt() || part.asInt() < 0) {
          throw badJson("assign", json, example,
              "partitions of " + topic.getKey() + " must be integers >= 0");
        }
        out.add(new TopicPartition(topic.getKey(), part.asInt()));
      }
    }
    if (out.isEmpty()) {
      throw new IllegalArgumentException("assign names no partition: " + json);
    }
    return out;
  }

  /** Offsets as Spark's Kafka source writes them: topics, then partitions, in order. */
  public static String format(Map<TopicPartition, Long> offsets) {
    ObjectNode root = MAPPER.createObjectNode();
    for (Map.Entry<TopicPartition, Long> e : new TreeMap<>(offsets).entrySet()) {
      ObjectNode topic = root.has(e.getKey().topic)
          ? (ObjectNode) root.get(e.getKey().topic)
          : root.putObject(e.getKey().topic);
      topic.put(Integer.toString(e.getKey().partition), e.getValue());
    }
    try {
      return MAPPER.writeValueAsString(root);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  private static JsonNode parse(String json, String option, String example) {
    if (json == null || json.trim().isEmpty()) {
      throw badJson(option, String.valueOf(json), example, "it is empty");
    }
    try {
      return MAPPER.readTree(json);
    } catch (JsonProcessingException e) {
      throw badJson(option, json, example, e.getOriginalMessage());
    }
  }

  private static int partitionNumber(String key, String option, String json, String example) {
    try {
      int partition = Integer.parseInt(key);
      if (partition >= 0) {
        return partition;
      }
    } catch (NumberFormatException ignored) {
      // below
    }
    throw badJson(option, json, example, "partition '" + key + "' is not a number >= 0");
  }

  private static IllegalArgumentException badJson(
      String option, String json, String example, String why) {
    return new IllegalArgumentException(
        "Expected e.g. " + example + " for option '" + option + "', got " + json + " (" + why
            + ")");
  }
}
