package io.raylog.spark;

import java.io.Serializable;
import java.util.Objects;

/** One partition of one topic; ordered by topic, then partition number. */
public final class TopicPartition implements Serializable, Comparable<TopicPartition> {
  private static final long serialVersionUID = 1L;

  public final String topic;
  public final int partition;

  public TopicPartition(String topic, int partition) {
    this.topic = Objects.requireNonNull(topic, "topic");
    this.partition = partition;
  }

  @Override
  public int compareTo(TopicPartition other) {
    int byTopic = topic.compareTo(other.topic);
    return byTopic != 0 ? byTopic : Integer.compare(partition, other.partition);
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof TopicPartition
        && ((TopicPartition) o).partition == partition
        && ((TopicPartition) o).topic.equals(topic);
  }

  @Override
  public int hashCode() {
    return topic.hashCode() * 31 + partition;
  }

  @Override
  public String toString() {
    return topic + "-" + partition;
  }
}
