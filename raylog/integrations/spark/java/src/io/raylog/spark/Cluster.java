package io.raylog.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import io.ray.api.ObjectRef;
import io.ray.api.PyActorHandle;
import io.ray.api.Ray;
import io.ray.api.function.PyActorMethod;
import io.ray.api.function.PyFunction;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Function;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * raylog as a Spark driver or executor JVM sees it, through Ray's cross-language calls: the
 * controller for metadata and writer gateways, the broker actors for offsets and records.
 * Every JVM in a RayDP session is a Ray worker or driver already; this only looks actors up
 * by name (namespace {@code raylog}) and calls their language-neutral {@code java_*} methods.
 * Thread-safe; one per JVM.
 */
public final class Cluster {
  private static final Logger LOG = LoggerFactory.getLogger(Cluster.class);

  public static final String NAMESPACE = "raylog";
  public static final String CONTROLLER = "raylog-controller";
  public static final String SCHEMA_REGISTRY = "raylog-schema-registry";
  static final long CALL_TIMEOUT_MS = 60_000;
  static final long RETRY_BACKOFF_MS = 200;

  private static volatile Cluster instance;

  private final Map<String, PyActorHandle> actors = new ConcurrentHashMap<>();
  private final Map<String, TopicInfo> topics = new ConcurrentHashMap<>();
  /** This node's cold-read gateway, once a reader asked for it. */
  private volatile String coldReader;

  /** Where one broker serves: its actor's name, Ray node and host. */
  public static final class BrokerInfo {
    public final int id;
    public final String actor;
    public final String nodeId;
    public final String host;

    BrokerInfo(int id, String actor, String nodeId, String host) {
      this.id = id;
      this.actor = actor;
      this.nodeId = nodeId;
      this.host = host;
    }
  }

  /** A partition's leader (null while it has none), leader epoch, replicas and ISR. */
  public static final class PartitionInfo {
    public final int partition;
    public final Integer leader;
    public final int leaderEpoch;
    public final int[] replicas;
    public final int[] isr;

    PartitionInfo(int partition, Integer leader, int leaderEpoch, int[] replicas, int[] isr) {
      this.partition = partition;
      this.leader = leader;
      this.leaderEpoch = leaderEpoch;
      this.replicas = replicas;
      this.isr = isr;
    }
  }

  /** A topic's partitions and the live brokers holding them, when they were learnt, and for
   * how long they may be used from the cache: the controller says (the Python clients' own
   * metadata age, raylog/client/connection.py's METADATA_MAX_AGE_S). */
  public static final class TopicInfo {
    public final String name;
    public final boolean compacted;
    /** Whether the topic keeps old segments in a tiered store (remote.storage.enable, which
     * cannot be turned off): only then can it have a cold part. True when the controller does
     * not say (one from before it did): its cold part is then asked for. */
    public final boolean tiered;
    public final List<PartitionInfo> partitions;
    public final Map<Integer, BrokerInfo> brokers;
    final long fetchedAt;
    final long maxAgeMs;

    TopicInfo(String name, boolean compacted, boolean tiered, List<PartitionInfo> partitions,
        Map<Integer, BrokerInfo> brokers, long maxAgeMs) {
      this.name = name;
      this.compacted = compacted;
      this.tiered = tiered;
      this.partitions = partitions;
      this.brokers = brokers;
      this.fetchedAt = System.currentTimeMillis();
      this.maxAgeMs = maxAgeMs;
    }

    /** The hosts of the in-sync replicas of a partition (where a task should run). */
    public String[] hosts(int partition) {
      Set<String> hosts = new LinkedHashSet<>();
      for (int broker : partitions.get(partition).isr) {
        BrokerInfo info = brokers.get(broker);
        if (info != null && info.host != null) {
          hosts.add(info.host);
        }
      }
      return hosts.toArray(new String[0]);
    }

    /** The broker to read a partition from (KIP-392): an in-sync replica on {@code nodeId}
     * if there is one, else the leader. */
    public BrokerInfo replicaFor(int partition, String nodeId) {
      PartitionInfo p = partitions.get(partition);
      for (int broker : p.isr) {
        BrokerInfo info = brokers.get(broker);
        if (info != null && info.nodeId.equals(nodeId)) {
          return info;
        }
      }
      return leaderOf(partition);
    }

    public BrokerInfo leaderOf(int partition) {
      PartitionInfo p = partitions.get(partition);
      BrokerInfo info = p.leader == null ? null : brokers.get(p.leader);
      if (info == null) {
        throw new RaylogException("LeaderNotAvailableError",
            name + "-" + partition + " has no live leader right now", true, null);
      }
      return info;
    }
  }

  private Cluster() {}

  /** This JVM's view of the cluster. */
  public static Cluster get() {
    if (instance == null) {
      synchronized (Cluster.class) {
        if (instance == null) {
          if (!Ray.isInitialized()) {
            throw new IllegalStateException("Ray is not initialized in this JVM: format(\"raylog\")"
                + " runs in a Spark session on Ray (raylog.integrations.spark.session())");
          }
          instance = new Cluster();
        }
      }
    }
    return instance;
  }

  /** The Ray node this JVM runs on (hex, as Python's node ids). */
  public static String nodeId() {
    return Ray.getRuntimeContext().getCurrentNodeId().toString();
  }

  PyActorHandle actor(String name) {
    PyActorHandle handle = actors.get(name);
    if (handle == null) {
      Optional<PyActorHandle> found = Ray.getActor(name, NAMESPACE);
      if (!found.isPresent()) {
        throw new RaylogException(
            name.equals(CONTROLLER) ? "NoClusterError" : RaylogException.ACTOR_LOST,
            "no raylog actor named " + name + " in Ray namespace " + NAMESPACE
                + (name.equals(CONTROLLER) ? ": is raylog running on this Ray cluster?" : ""),
            !name.equals(CONTROLLER), null);
      }
      handle = found.get();
      actors.put(name, handle);
    }
    return handle;
  }

  static <T> T await(ObjectRef<T> ref, long timeoutMs) {
    try {
      return Ray.get(ref, timeoutMs);
    } catch (RuntimeException e) {
      throw RaylogException.of(e);
    }
  }

  /** Calls a controller method that takes no argument or one string and answers a string. */
  private String callController(String method, String argument) {
    PyActorMethod<String> m = PyActorMethod.of(method, String.class);
    PyActorHandle controller = actor(CONTROLLER);
    return await(argument == null ? controller.task(m).remote()
        : controller.task(m, argument).remote(), CALL_TIMEOUT_MS);
  }

  static JsonNode json(String text) {
    try {
      return OffsetsJson.MAPPER.readTree(text);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("raylog answered with malformed JSON: " + text, e);
    }
  }

  static String toJson(Object value) {
    try {
      return OffsetsJson.MAPPER.writeValueAsString(value);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  /** The user topics' names. */
  public List<String> topicNames() {
    List<String> out = new ArrayList<>();
    for (JsonNode name : json(callController("java_topics", null))) {
      out.add(name.asText());
    }
    return out;
  }

  /** The topics named, from the cache unless {@code refresh} or old; UnknownTopicError for a
   * topic that does not exist. */
  public Map<String, TopicInfo> topics(Collection<String> names, boolean refresh) {
    return topics(names, refresh ? 0 : Long.MAX_VALUE);
  }

  /** As {@link #topics(Collection, boolean)}, from the cache only what was fetched less than
   * {@code maxAgeMs} ago (and within the metadata's own age). */
  public Map<String, TopicInfo> topics(Collection<String> names, long maxAgeMs) {
    Map<String, TopicInfo> out = new TreeMap<>();
    List<String> wanted = new ArrayList<>();
    long now = System.currentTimeMillis();
    for (String name : names) {
      TopicInfo cached = topics.get(name);
      if (cached != null && now - cached.fetchedAt < Math.min(cached.maxAgeMs, maxAgeMs)) {
        out.put(name, cached);
      } else {
        wanted.add(name);
      }
    }
    if (wanted.isEmpty()) {
      return out;
    }
    JsonNode answer = json(callController("java_metadata", toJson(wanted)));
    for (String name : wanted) {
      JsonNode raw = answer.path(name);
      if (raw.has("error")) {
        throw RaylogException.fromJson(raw.get("error"));
      }
      TopicInfo info = parseTopic(name, raw);
      topics.put(name, info);
      out.put(name, info);
    }
    return out;
  }

  public TopicInfo topic(String name, boolean refresh) {
    return topics(java.util.Collections.singletonList(name), refresh).get(name);
  }

  private static TopicInfo parseTopic(String name, JsonNode raw) {
    Map<Integer, BrokerInfo> brokers = new HashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = raw.path("brokers").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      int id = Integer.parseInt(e.getKey());
      JsonNode b = e.getValue();
      brokers.put(id, new BrokerInfo(id, b.path("actor").asText(), b.path("node_id").asText(),
          b.path("host").isNull() ? null : b.path("host").asText()));
    }
    List<PartitionInfo> partitions = new ArrayList<>();
    for (JsonNode p : raw.path("partitions")) {
      partitions.add(new PartitionInfo(p.path("partition").asInt(),
          p.path("leader").isNull() ? null : p.path("leader").asInt(),
          p.path("leader_epoch").asInt(), ints(p.path("replicas")), ints(p.path("isr"))));
    }
    return new TopicInfo(name, raw.path("compacted").asBoolean(false),
        raw.path("tiered").asBoolean(true), partitions, brokers, raw.path("max_age_ms").asLong(0));
  }

  private static int[] ints(JsonNode array) {
    int[] out = new int[array.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = array.get(i).asInt();
    }
    return out;
  }

  /** The partitions a query reads now: every partition of the subscribed topics, or of the
   * topics matching the pattern, or the assigned ones (which must exist). */
  public List<TopicPartition> partitions(RaylogOptions options) {
    List<TopicPartition> out = new ArrayList<>();
    switch (options.subscription) {
      case ASSIGN:
        Set<String> names = new LinkedHashSet<>();
        for (TopicPartition tp : options.assigned) {
          names.add(tp.topic);
        }
        Map<String, TopicInfo> infos = topics(names, true);
        for (TopicPartition tp : options.assigned) {
          int count = infos.get(tp.topic).partitions.size();
          if (tp.partition >= count) {
            throw new RaylogException("UnknownPartitionError", "assign names " + tp + " but topic "
                + tp.topic + " has partitions 0.." + (count - 1), false, null);
          }
          out.add(tp);
        }
        return out;
      case PATTERN:
        Pattern pattern = Pattern.compile(options.pattern);
        List<String> matching = new ArrayList<>();
        for (String name : topicNames()) {
          if (pattern.matcher(name).matches()) {
            matching.add(name);
          }
        }
        return allPartitions(topics(matching, true).values());
      default:
        return allPartitions(topics(options.topics, true).values());
    }
  }

  private static List<TopicPartition> allPartitions(Collection<TopicInfo> infos) {
    List<TopicPartition> out = new ArrayList<>();
    for (TopicInfo info : infos) {
      for (PartitionInfo p : info.partitions) {
        out.add(new TopicPartition(info.name, p.partition));
      }
    }
    return out;
  }

  /**
   * Each partition's offsets from its leader, with the first offset at or after
   * {@code timestamps.apply(tp)} where that is not null. Retriable failures (a leader moving,
   * a broker restarting) are tried again with fresh metadata until {@code timeoutMs} passed.
   */
  public Map<TopicPartition, PartitionOffsets> offsets(Collection<TopicPartition> partitions,
      Function<TopicPartition, Long> timestamps, RaylogOptions options) {
    Map<TopicPartition, PartitionOffsets> out = offsets(partitions, timestamps,
        options.fetchTimeoutMs);
    if (options.readCommitted()) {
      out.replaceAll((tp, o) -> o.committed());
    }
    return out;
  }

  /** As {@link #offsets(Collection, Function, RaylogOptions)}, the latest offset being the
   * high watermark (read_uncommitted). */
  public Map<TopicPartition, PartitionOffsets> offsets(Collection<TopicPartition> partitions,
      Function<TopicPartition, Long> timestamps, long timeoutMs) {
    Map<TopicPartition, PartitionOffsets> out = new TreeMap<>();
    List<TopicPartition> pending = new ArrayList<>(partitions);
    long deadline = System.currentTimeMillis() + timeoutMs;
    boolean refresh = false;
    while (true) {
      RaylogException last = null;
      Set<String> names = new LinkedHashSet<>();
      for (TopicPartition tp : pending) {
        names.add(tp.topic);
      }
      Map<String, TopicInfo> infos = topics(names, refresh);
      Map<String, List<TopicPartition>> byBroker = new TreeMap<>();
      Map<String, List<Object[]>> requests = new TreeMap<>();
      List<TopicPartition> failed = new ArrayList<>();
      for (TopicPartition tp : pending) {
        TopicInfo info = infos.get(tp.topic);
        BrokerInfo leader;
        try {
          leader = info.leaderOf(tp.partition);
        } catch (RaylogException e) {
          failed.add(tp);
          last = e;
          continue;
        }
        byBroker.computeIfAbsent(leader.actor, k -> new ArrayList<>()).add(tp);
        requests.computeIfAbsent(leader.actor, k -> new ArrayList<>()).add(new Object[] {
            tp.topic, tp.partition, info.partitions.get(tp.partition).leaderEpoch,
            timestamps.apply(tp)});
      }
      Map<String, ObjectRef<String>> calls = new TreeMap<>();
      for (Map.Entry<String, List<Object[]>> e : requests.entrySet()) {
        try {
          calls.put(e.getKey(), actor(e.getKey())
              .task(PyActorMethod.of("java_offsets", String.class), toJson(e.getValue()))
              .remote());
        } catch (RaylogException ex) {
          failed.addAll(byBroker.get(e.getKey()));
          last = ex;
        }
      }
      for (Map.Entry<String, ObjectRef<String>> e : calls.entrySet()) {
        List<TopicPartition> asked = byBroker.get(e.getKey());
        JsonNode answers;
        try {
          answers = json(await(e.getValue(), CALL_TIMEOUT_MS));
        } catch (RaylogException ex) {
          if (!ex.retriable) {
            throw ex;
          }
          failed.addAll(asked);
          last = ex;
          continue;
        }
        for (int i = 0; i < asked.size(); i++) {
          JsonNode a = answers.get(i);
          if (a.has("error")) {
            RaylogException ex = RaylogException.fromJson(a.get("error"));
            if (!ex.retriable) {
              throw ex;
            }
            failed.add(asked.get(i));
            last = ex;
          } else {
            out.put(asked.get(i), new PartitionOffsets(a.get("log_start").asLong(),
                a.get("high_watermark").asLong(),
                a.get("timestamp_offset").isNull() ? null : a.get("timestamp_offset").asLong(),
                a.path("size_bytes").asLong(-1),
                a.path("last_stable").asLong(a.get("high_watermark").asLong())));
          }
        }
      }
      if (failed.isEmpty()) {
        return out;
      }
      if (System.currentTimeMillis() >= deadline) {
        throw new RaylogException(last.type, "offsets of " + failed + " unavailable for "
            + timeoutMs + " ms: " + last.getMessage(), true, last);
      }
      LOG.info("asking for the offsets of {} again after {}", failed, last.toString());
      sleep(RETRY_BACKOFF_MS);
      pending = failed;
      refresh = true;
    }
  }

  /** Asks a broker for records [start, end) of a partition as Arrow IPC holding
   * {@code columns}; the answer comes later, through the ref. */
  public ObjectRef<byte[]> read(BrokerInfo broker, TopicPartition tp, int leaderEpoch,
      long start, long end, String columns, String isolation) {
    return actor(broker.actor).task(PyActorMethod.of("java_read", byte[].class), tp.topic,
        tp.partition, new Object[] {leaderEpoch, start, end}, columns, isolation).remote();
  }

  /** Asks a broker for the stored batches holding records [start, end) of a partition, as
   * they are on disk (BatchDecoder reads them); the answer comes later, through the ref. */
  public ObjectRef<byte[]> readBatches(BrokerInfo broker, TopicPartition tp, int leaderEpoch,
      long start, long end, String isolation) {
    return actor(broker.actor).task(PyActorMethod.of("java_read_batches", byte[].class),
        tp.topic, tp.partition, new Object[] {leaderEpoch, start, end}, isolation).remote();
  }

  /** The Python module whose function plans cold ranges (a cross-language task). */
  static final String COLD_MODULE = "raylog.integrations.spark.cold";
  /** CPUs the planning task asks for: it waits on the leaders more than it works. */
  static final double COLD_CPUS = 0.25;

  /** The cold pieces of ranges (a JSON request of raylog.integrations.spark.cold.java_split):
   * planned by a Python task that asks the leaders for their tiered views. */
  public String tieredPlan(String request, long timeoutMs) {
    return await(Ray.task(PyFunction.of(COLD_MODULE, "java_split", String.class), request)
        .setResource("CPU", COLD_CPUS).remote(), timeoutMs);
  }

  /** The name of this node's cold-read gateway (actors/spark_cold_reader.py), asked of the
   * controller once per JVM (and again after {@link #forgetColdReader}). */
  public String coldReader() {
    String name = coldReader;
    if (name == null) {
      name = callController("java_cold_reader", nodeId());
      coldReader = name;
    }
    return name;
  }

  /** Forgets cold-read gateway {@code name}, found gone: the next {@link #coldReader} asks
   * the controller, which starts a new one. */
  public void forgetColdReader(String name) {
    forget(name, null);
    if (name.equals(coldReader)) {
      coldReader = null;
    }
  }

  /** Asks cold-read gateway {@code reader} for records [start, end) of a cold piece, read
   * from the object store: its stored batches ({@code batches}) or an Arrow IPC stream of
   * {@code columns}; the answer comes later, through the ref. */
  public ObjectRef<byte[]> readCold(String reader, String piece, long start, long end,
      boolean batches, String columns) {
    return actor(reader).task(PyActorMethod.of("java_cold_read", byte[].class), piece, start,
        end, batches, columns).remote();
  }

  /** Begins, in writer gateway {@code writer}, the transaction of the transactional id in
   * {@code settings} (JSON producer settings), fencing earlier producers of that id.
   * {@code batch}: "" for a batch write, or a micro-batch's JSON {@code {"topic", "batch"}};
   * returns true, beginning nothing, when the id has committed that micro-batch already. */
  public boolean beginTransaction(String writer, String settings, String batch,
      long timeoutMs) {
    String answer = awaitWriter(writer, actor(writer).task(
        PyActorMethod.of("java_begin", String.class), settings, batch).remote(), timeoutMs);
    return json(answer).path("committed").asBoolean(false);
  }

  /** Commits ({@code outcome} "commit") or aborts ("abort") the open transaction of
   * {@code transactionalId} held by writer gateway {@code writer}. */
  public void endTransaction(String writer, String transactionalId, String outcome,
      long timeoutMs) {
    awaitWriter(writer, actor(writer).task(PyActorMethod.of("java_end", String.class),
        transactionalId, outcome).remote(), timeoutMs);
  }

  /** Ends a batch write task's part of its transaction, {@code transactionalId}, held by
   * writer gateway {@code writer}: every record sent, the producer closed, the transaction
   * left open for the driver's joint commit. The answer's {@code producer_id} and
   * {@code producer_epoch} name it (neither: the coordinator holds nothing of it). */
  public JsonNode prepareTransaction(String writer, String transactionalId, long timeoutMs) {
    return json(awaitWriter(writer, actor(writer).task(
        PyActorMethod.of("java_prepare", String.class), transactionalId).remote(), timeoutMs));
  }

  /** Commits the prepared transactions {@code members} (JSON {@code [[transactional id,
   * producer id, epoch], ...]}) all or none, as the joint commit {@code writeId}, through
   * writer gateway {@code writer}: returns once the commit is decided. */
  public void commitJointly(String writer, String writeId, String members, long timeoutMs) {
    awaitWriter(writer, actor(writer).task(PyActorMethod.of("java_commit_jointly",
        String.class), writeId, members).remote(), timeoutMs);
  }

  /** Aborts the transactions of {@code transactionalIds} (a JSON list) wherever they are
   * open, through writer gateway {@code writer} (it fences the ids it does not hold). */
  public void abortTransactions(String writer, String transactionalIds, long timeoutMs) {
    awaitWriter(writer, actor(writer).task(PyActorMethod.of("java_abort", String.class),
        transactionalIds).remote(), timeoutMs);
  }

  /** A writer gateway's answer; a gateway found gone is forgotten, so that the next call
   * (a task's next attempt in this JVM) asks the controller for a new one. */
  private <T> T awaitWriter(String writer, ObjectRef<T> ref, long timeoutMs) {
    try {
      return await(ref, timeoutMs);
    } catch (RaylogException e) {
      if (e.type.equals(RaylogException.ACTOR_LOST)) {
        forget(writer, null);
      }
      throw e;
    }
  }

  /** The name of the writer gateway actor for Spark tasks on {@code nodeId}. */
  public String writerFor(String nodeId) {
    return callController("java_writer", nodeId);
  }

  /** Hands rows (Arrow IPC) to a writer gateway; the ref answers once they are acknowledged. */
  public ObjectRef<String> write(String writer, String topic, String settings, byte[] rows) {
    return actor(writer).task(PyActorMethod.of("java_write", String.class), topic, settings, rows)
        .remote();
  }

  /** The text of the schema with global id {@code id} (the writer schema of the values that
   * carry it); a RaylogException of type SchemaNotFoundError if the registry has none. */
  public String schemaById(int id) {
    return json(callRegistry("java_schema", id, null)).path("schema").asText();
  }

  /** The text of version {@code version} ("latest" or a number) of {@code subject}. */
  public String schemaVersion(String subject, String version) {
    return json(callRegistry("java_version", subject, version)).path("schema").asText();
  }

  /** Calls the schema registry actor (started by the controller if the cluster has none yet),
   * trying again while it is restarting (it replays its log first), for CALL_TIMEOUT_MS. */
  private String callRegistry(String method, Object first, Object second) {
    PyActorMethod<String> m = PyActorMethod.of(method, String.class);
    long deadline = System.currentTimeMillis() + CALL_TIMEOUT_MS;
    while (true) {
      try {
        if (!actors.containsKey(SCHEMA_REGISTRY)
            && !Ray.getActor(SCHEMA_REGISTRY, NAMESPACE).isPresent()) {
          callController("java_schema_registry", null);
        }
        PyActorHandle registry = actor(SCHEMA_REGISTRY);
        return await(second == null ? registry.task(m, first).remote()
            : registry.task(m, first, second).remote(), CALL_TIMEOUT_MS);
      } catch (RaylogException e) {
        if (!e.retriable || System.currentTimeMillis() >= deadline) {
          throw e;
        }
        LOG.info("asking the schema registry again after {}", e.toString());
        forget(SCHEMA_REGISTRY, null);
        sleep(RETRY_BACKOFF_MS);
      }
    }
  }

  /** Forget a cached actor handle (after it failed) and a topic's metadata. */
  public void forget(String actorName, String topic) {
    if (actorName != null) {
      actors.remove(actorName);
    }
    if (topic != null) {
      topics.remove(topic);
    }
  }

  static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RaylogException("Interrupted", "interrupted", false, e);
    }
  }
}
