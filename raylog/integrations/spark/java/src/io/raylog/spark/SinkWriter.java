package io.raylog.spark;

import io.ray.api.ObjectRef;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.nio.channels.Channels;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.complex.StructVector;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.LongAccumulator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes a Spark task's rows to raylog, as Spark's Kafka sink takes them: {@code value}
 * (string or binary), and optionally {@code key} (string or binary), {@code topic} (unless
 * the {@code topic} option is set, which wins), {@code partition} (int; null leaves it to
 * the partitioner) and {@code headers} (array of struct key string, value binary). Rows go
 * into Arrow record batches of about {@link #BATCH_BYTES}, each handed as Arrow IPC to the
 * writer gateway on this node (a Python actor that produces them with raylog's Producer:
 * murmur2 partitioning of keys, batching, idempotence, acks), at most
 * {@link #IN_FLIGHT} at a time. commit() returns once every record is acknowledged.
 */
final class SinkWriter implements DataWriter<InternalRow> {
  private static final Logger LOG = LoggerFactory.getLogger(SinkWriter.class);
  static final long BATCH_BYTES = 4L << 20;
  static final int BATCH_ROWS = 65536;
  static final int IN_FLIGHT = 2;

  /** What a write needs, checked against the rows' schema on the driver. */
  static final class Settings implements Serializable {
    private static final long serialVersionUID = 1L;

    final String topic; // the topic option, or null: each row's topic
    final String producer; // producer settings as JSON ("" for the defaults)
    final String transactionalId; // null: no transactions (at least once)
    final int topicColumn;
    final int keyColumn;
    final boolean keyIsString;
    final int valueColumn;
    final boolean valueIsString;
    final int partitionColumn;
    final int headersColumn;
    final long timeoutMs;

    private Settings(StructType schema, Map<String, String> options) {
      this.topic = RaylogOptions.sinkTopic(options);
      this.producer = RaylogOptions.producerSettings(options);
      this.transactionalId = RaylogOptions.sinkTransactionalId(options);
      this.topicColumn = column(schema, "topic", topic == null, DataTypes.StringType);
      if (topic == null && topicColumn < 0) {
        throw new IllegalArgumentException("topic option required when no 'topic' attribute "
            + "is present. Use the topic option for setting a topic.");
      }
      this.keyColumn = column(schema, "key", true, DataTypes.StringType, DataTypes.BinaryType);
      this.keyIsString = keyColumn >= 0
          && schema.fields()[keyColumn].dataType().equals(DataTypes.StringType);
      this.valueColumn = column(schema, "value", true, DataTypes.StringType,
          DataTypes.BinaryType);
      if (valueColumn < 0) {
        throw new IllegalArgumentException("Required attribute 'value' not found");
      }
      this.valueIsString = schema.fields()[valueColumn].dataType().equals(DataTypes.StringType);
      this.partitionColumn = column(schema, "partition", true, DataTypes.IntegerType);
      this.headersColumn = column(schema, "headers", true, KafkaSchema.HEADERS);
      String timeout = RaylogOptions.lowerKeys(options).get(RaylogOptions.FETCH_TIMEOUT_MS);
      this.timeoutMs = timeout == null ? 300_000L : Long.parseLong(timeout.trim());
    }

    /** The settings for writing rows of {@code schema}; IllegalArgumentException, before
     * anything is written, for a schema or option the sink cannot take. */
    static Settings of(StructType schema, Map<String, String> options) {
      return new Settings(schema, options);
    }

    /** The index of column {@code name} (matched as Spark matches names, ignoring case),
     * -1 if absent or not {@code used} (a topic column when the topic option is set); a
     * column of another type than {@code types} is refused. */
    private static int column(StructType schema, String name, boolean used, DataType... types) {
      StructField[] fields = schema.fields();
      for (int i = 0; i < fields.length; i++) {
        if (!fields[i].name().toLowerCase(Locale.ROOT).equals(name)) {
          continue;
        }
        if (!used) {
          break;
        }
        DataType type = fields[i].dataType();
        for (DataType allowed : types) {
          if (sameType(type, allowed)) {
            return i;
          }
        }
        StringBuilder names = new StringBuilder();
        for (DataType allowed : types) {
          names.append(names.length() == 0 ? "" : " or ").append(allowed.simpleString());
        }
        throw new IllegalArgumentException(Character.toUpperCase(name.charAt(0))
            + name.substring(1) + " attribute type must be " + names + ", not "
            + type.simpleString());
      }
      return -1;
    }

    private static boolean sameType(DataType type, DataType allowed) {
      return type.equals(allowed) || DataType.equalsIgnoreNullability(type, allowed);
    }

    /** Writes every row of {@code data} (a batch {@code df.write}), task by task; returns
     * how many records were written. */
    long writeAll(Dataset<Row> data) {
      if (transactionalId != null) {
        return writeAllInTransactions(data);
      }
      Settings settings = this;
      LongAccumulator written = data.sparkSession().sparkContext()
          .longAccumulator("raylog records written");
      data.queryExecution().toRdd().toJavaRDD().foreachPartition(rows -> {
        SinkWriter writer = new SinkWriter(settings);
        try {
          while (rows.hasNext()) {
            writer.write(rows.next());
          }
          written.add(((Written) writer.commit()).records);
        } catch (Throwable t) {
          writer.abort();
          throw t;
        } finally {
          writer.close();
        }
      });
      return written.value();
    }

    /**
     * Writes every row of {@code data} or none: task {@code p} writes in the transaction of
     * {@code <transactional.id>-<p>} and prepares it (left open, named by its producer id
     * and epoch); once every task succeeded the driver commits them all in one joint commit,
     * whose one decision record at the coordinator is the commit point of all, and if the
     * job fails it aborts them all (a task's failed attempt aborts its own, and the next
     * attempt's begin fences what it left). Returns how many records were written.
     */
    private long writeAllInTransactions(Dataset<Row> data) {
      Settings settings = this;
      org.apache.spark.api.java.JavaRDD<InternalRow> rdd =
          data.queryExecution().toRdd().toJavaRDD();
      List<String> ids = new ArrayList<>();
      for (int p = 0; p < rdd.getNumPartitions(); p++) {
        ids.add(transactionalId + "-" + p);
      }
      List<Written> prepared;
      try {
        prepared = rdd.mapPartitions(rows -> {
          SinkWriter writer = new SinkWriter(settings,
              settings.transactionalId + "-" + org.apache.spark.TaskContext.getPartitionId());
          try {
            while (rows.hasNext()) {
              writer.write(rows.next());
            }
            return java.util.Collections.singletonList((Written) writer.commit()).iterator();
          } catch (Throwable t) {
            writer.abort();
            throw t;
          } finally {
            writer.close();
          }
        }).collect();
      } catch (Exception e) { // SparkException is checked, thrown from Scala undeclared
        abortAll(ids, e);
        throw e;
      }
      return commitJointly(prepared, ids);
    }

    /**
     * Commits the tasks' {@code prepared} transactions in one joint commit (all or none),
     * through the driver's node's writer gateway; returns how many records they hold. If it
     * fails, every transaction of {@code ids} is aborted: the commit was refused (nothing
     * committed), or its outcome is unknown (all of it committed, or all aborted now).
     */
    long commitJointly(List<Written> prepared, List<String> ids) {
      List<List<Object>> members = new ArrayList<>();
      long records = 0;
      for (Written w : prepared) {
        if (w != null && w.transactionalId != null) {
          members.add(Arrays.asList(w.transactionalId, w.producerId, w.producerEpoch));
          records += w.records;
        }
      }
      if (members.isEmpty()) {
        return 0; // no task had a row
      }
      Cluster cluster = Cluster.get();
      // A name of its own per write: the coordinator answers a retry of it as the first, so
      // an answer lost (a gateway lost, a timeout) is asked again, never committed twice.
      String writeId = transactionalId + "@" + java.util.UUID.randomUUID();
      long deadline = System.currentTimeMillis() + timeoutMs;
      while (true) {
        try {
          cluster.commitJointly(cluster.writerFor(Cluster.nodeId()), writeId,
              Cluster.toJson(members), timeoutMs);
          return records;
        } catch (RaylogException e) {
          if (!e.retriable || System.currentTimeMillis() >= deadline) {
            throw aborted(ids, e);
          }
          LOG.info("the joint commit {} is asked again: {}", writeId, e.toString());
          Cluster.sleep(Cluster.RETRY_BACKOFF_MS);
        }
      }
    }

    /** The coordinator's refusals of a joint commit: nothing of it was committed. */
    private static final java.util.Set<String> REFUSALS = new java.util.HashSet<>(
        Arrays.asList("ProducerFencedError", "InvalidProducerIdMappingError",
            "InvalidTxnStateError", "InvalidArgumentError"));

    /** Aborts the transactions of {@code ids} after the joint commit failed with {@code e};
     * returns the error to throw. */
    private RaylogException aborted(List<String> ids, RaylogException e) {
      abortAll(ids, e);
      return new RaylogException(e.type, "the raylog write did not commit (" + e.getMessage()
          + (REFUSALS.contains(e.type) ? "): nothing was committed, its transactions are aborted"
          : "): its outcome was not known, and its transactions were aborted unless the"
              + " commit had been decided (then all of it is committed)"), false, e);
    }

    /**
     * Commits the open transactions of the tasks' {@code prepared} messages one by one (the
     * streaming sink's: each task's transaction also records its micro-batch, so a batch
     * partly committed is rerun safely);
     * returns how many records they hold. If the first commit fails, every transaction of
     * {@code ids} is aborted; if a later one fails, the error says which committed and
     * {@code whatThen}.
     */
    long commitAll(Iterable<Written> prepared, List<String> ids, String whatThen) {
      Cluster cluster = Cluster.get();
      long records = 0;
      List<String> committed = new ArrayList<>();
      for (Written w : prepared) {
        if (w == null || w.transactionalId == null) {
          continue; // a task without rows (or whose batch is written) began nothing
        }
        try {
          cluster.endTransaction(w.gateway, w.transactionalId, "commit", timeoutMs);
        } catch (RaylogException e) {
          if (!committed.isEmpty()) {
            throw new RaylogException(e.type, "the raylog write is partly committed: "
                + committed + " committed, " + w.transactionalId + " failed (" + e.getMessage()
                + "); " + whatThen, false, e);
          }
          abortAll(ids, e);
          throw e;
        }
        committed.add(w.transactionalId);
        records += w.records;
      }
      return records;
    }

    /** Aborts the transactions of {@code ids} wherever they are open; a failure to is
     * added to {@code cause} (the coordinator's timeout aborts what is left). */
    void abortAll(List<String> ids, Exception cause) {
      Exception failed = abortAll(ids);
      if (failed != null) {
        cause.addSuppressed(failed);
      }
    }

    /** Aborts the transactions of {@code ids} wherever they are open; returns the failure
     * to, if any (the coordinator's timeout aborts what is left). */
    Exception abortAll(List<String> ids) {
      Cluster cluster = Cluster.get();
      try {
        cluster.abortTransactions(cluster.writerFor(Cluster.nodeId()),
            OffsetsJson.MAPPER.writeValueAsString(ids), timeoutMs);
        return null;
      } catch (RaylogException | com.fasterxml.jackson.core.JsonProcessingException e) {
        return e;
      }
    }
  }

  /** How many records a task wrote. */
  static final class Written implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;
    final long records;
    final String gateway; // a transactional write's: where its open transaction is
    final String transactionalId; // null unless a transaction was begun
    final long producerId; // a prepared transaction's (a batch write's); -1 otherwise
    final int producerEpoch;

    Written(long records) {
      this(records, null, null);
    }

    Written(long records, String gateway, String transactionalId) {
      this(records, gateway, transactionalId, -1, -1);
    }

    Written(long records, String gateway, String transactionalId, long producerId,
        int producerEpoch) {
      this.records = records;
      this.gateway = gateway;
      this.transactionalId = transactionalId;
      this.producerId = producerId;
      this.producerEpoch = producerEpoch;
    }
  }

  /** A batch handed to the gateway, kept until acknowledged to send it again if the
   * gateway itself was lost. */
  private static final class Sent {
    final byte[] rows;
    ObjectRef<String> ref;

    Sent(byte[] rows, ObjectRef<String> ref) {
      this.rows = rows;
      this.ref = ref;
    }
  }

  private final Settings settings;
  private final Cluster cluster;
  private final BufferAllocator allocator;
  private final Deque<Sent> inFlight = new ArrayDeque<>();
  private String gateway;
  private final String transactionalId; // null: no transaction
  private final String producerSettings; // the settings' JSON, with the transactional id
  private final long batchId; // the micro-batch whose transaction this is; -1: a batch write
  private boolean begun; // the transaction began in the gateway
  private boolean alreadyWritten; // the id committed this micro-batch already: rows dropped
  private boolean prepared; // every record acknowledged: the driver ends the transaction
  private VectorSchemaRoot root;
  private VarCharVector topics;
  private VarBinaryVector keys;
  private VarBinaryVector values;
  private IntVector partitions;
  private ListVector headers;
  private int rows;
  private long bytes;
  private long written;

  SinkWriter(Settings settings) {
    this(settings, null);
  }

  /** A writer whose rows go into the transaction of {@code transactionalId} (null: none). */
  SinkWriter(Settings settings, String transactionalId) {
    this(settings, transactionalId, -1);
  }

  /**
   * A writer of micro-batch {@code batchId} (-1: a batch write) whose rows go into the
   * transaction of {@code transactionalId}: the transaction also commits the record that the
   * id wrote this batch, and if an earlier run of the query committed it already the rows
   * are dropped (the gateway's {@code java_begin} says so).
   */
  SinkWriter(Settings settings, String transactionalId, long batchId) {
    this.settings = settings;
    this.transactionalId = transactionalId;
    this.batchId = batchId;
    this.producerSettings = transactionalId == null ? settings.producer
        : withTransactionalId(settings.producer, transactionalId);
    this.cluster = Cluster.get();
    this.allocator = RangeReader.ROOT.newChildAllocator("raylog sink", 0, Long.MAX_VALUE);
  }

  private static String withTransactionalId(String producer, String transactionalId) {
    try {
      Map<String, Object> parsed = new java.util.TreeMap<>();
      if (!producer.isEmpty()) {
        java.util.Iterator<Map.Entry<String, com.fasterxml.jackson.databind.JsonNode>> fields =
            OffsetsJson.MAPPER.readTree(producer).fields();
        while (fields.hasNext()) {
          Map.Entry<String, com.fasterxml.jackson.databind.JsonNode> e = fields.next();
          parsed.put(e.getKey(), e.getValue());
        }
      }
      parsed.put("transactional_id", transactionalId);
      return OffsetsJson.MAPPER.writeValueAsString(parsed);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  @Override
  public void write(InternalRow row) throws IOException {
    if (alreadyWritten) {
      return;
    }
    if (transactionalId != null && !begun) {
      begin(row);
      if (alreadyWritten) {
        return;
      }
    }
    if (root == null) {
      newBatch();
    }
    if (topics != null) {
      if (row.isNullAt(settings.topicColumn)) {
        throw new IllegalArgumentException("a row's topic is null and no 'topic' option is set");
      }
      byte[] topic = row.getUTF8String(settings.topicColumn).getBytes();
      topics.setSafe(rows, topic);
      bytes += topic.length;
    }
    if (keys != null) {
      bytes += setBytes(keys, row, settings.keyColumn, settings.keyIsString);
    }
    bytes += setBytes(values, row, settings.valueColumn, settings.valueIsString);
    if (partitions != null) {
      if (row.isNullAt(settings.partitionColumn)) {
        partitions.setNull(rows);
      } else {
        partitions.setSafe(rows, row.getInt(settings.partitionColumn));
      }
    }
    if (headers != null) {
      bytes += setHeaders(row);
    }
    rows++;
    if (rows >= BATCH_ROWS || bytes >= BATCH_BYTES) {
      send();
    }
  }

  /** Begins the task's transaction at its first row (a task without rows begins none). */
  private void begin(InternalRow row) {
    String topic = settings.topic;
    if (topic == null && !row.isNullAt(settings.topicColumn)) {
      topic = row.getUTF8String(settings.topicColumn).toString();
    }
    if (topic == null) {
      throw new IllegalArgumentException("a row's topic is null and no 'topic' option is set");
    }
    if (gateway == null) {
      gateway = cluster.writerFor(Cluster.nodeId());
    }
    String batch = "";
    if (batchId >= 0) {
      Map<String, Object> record = new java.util.TreeMap<>();
      record.put("topic", topic);
      record.put("batch", batchId);
      batch = Cluster.toJson(record);
    }
    alreadyWritten = cluster.beginTransaction(gateway, producerSettings, batch,
        settings.timeoutMs);
    if (alreadyWritten) {
      LOG.info("{} committed micro-batch {} already: this task writes nothing",
          transactionalId, batchId);
    }
    begun = !alreadyWritten;
  }

  private int setBytes(VarBinaryVector vector, InternalRow row, int column, boolean string) {
    if (row.isNullAt(column)) {
      vector.setNull(rows);
      return 0;
    }
    byte[] data = string ? row.getUTF8String(column).getBytes() : row.getBinary(column);
    vector.setSafe(rows, data);
    return data.length;
  }

  private long setHeaders(InternalRow row) {
    if (row.isNullAt(settings.headersColumn)) {
      headers.setNull(rows);
      return 0;
    }
    ArrayData array = row.getArray(settings.headersColumn);
    StructVector entries = (StructVector) headers.getDataVector();
    VarCharVector keys = entries.getChild("key", VarCharVector.class);
    VarBinaryVector values = entries.getChild("value", VarBinaryVector.class);
    int at = headers.startNewValue(rows);
    long size = 0;
    for (int i = 0; i < array.numElements(); i++) {
      if (array.isNullAt(i)) {
        throw new IllegalArgumentException("a row's headers hold a null header");
      }
      InternalRow header = array.getStruct(i, 2);
      if (header.isNullAt(0)) {
        throw new IllegalArgumentException("a header's key must not be null");
      }
      byte[] key = header.getUTF8String(0).getBytes();
      entries.setIndexDefined(at + i);
      keys.setSafe(at + i, key);
      size += key.length;
      if (header.isNullAt(1)) {
        values.setNull(at + i);
      } else {
        byte[] value = header.getBinary(1);
        values.setSafe(at + i, value);
        size += value.length;
      }
    }
    headers.endValue(rows, array.numElements());
    return size;
  }

  private void newBatch() {
    List<FieldVector> vectors = new ArrayList<>();
    topics = settings.topicColumn >= 0 && settings.topic == null
        ? new VarCharVector("topic", allocator) : null;
    keys = settings.keyColumn >= 0 ? new VarBinaryVector("key", allocator) : null;
    values = new VarBinaryVector("value", allocator);
    partitions = settings.partitionColumn >= 0 ? new IntVector("partition", allocator) : null;
    headers = settings.headersColumn >= 0 ? headersVector() : null;
    for (FieldVector v : Arrays.asList(topics, keys, values, partitions, headers)) {
      if (v != null) {
        v.allocateNew();
        vectors.add(v);
      }
    }
    root = new VectorSchemaRoot(vectors);
    rows = 0;
    bytes = 0;
  }

  private ListVector headersVector() {
    Field key = new Field("key", FieldType.nullable(ArrowType.Utf8.INSTANCE), null);
    Field value = new Field("value", FieldType.nullable(ArrowType.Binary.INSTANCE), null);
    Field entry = new Field("element", FieldType.nullable(ArrowType.Struct.INSTANCE),
        Arrays.asList(key, value));
    Field list = new Field("headers", FieldType.nullable(ArrowType.List.INSTANCE),
        Arrays.asList(entry));
    return (ListVector) list.createVector(allocator);
  }

  /** Hands the current batch to the gateway (waiting for the oldest if too many are out). */
  private void send() {
    if (root == null || rows == 0) {
      return;
    }
    byte[] data;
    try {
      root.setRowCount(rows);
      if (headers != null) {
        StructVector entries = (StructVector) headers.getDataVector();
        int children = headers.getOffsetBuffer().getInt((long) rows * ListVector.OFFSET_WIDTH);
        entries.setValueCount(children);
        headers.setValueCount(rows);
      }
      ByteArrayOutputStream out = new ByteArrayOutputStream((int) Math.min(bytes * 2 + 4096,
          Integer.MAX_VALUE - 16));
      try (ArrowStreamWriter writer = new ArrowStreamWriter(root, null,
          Channels.newChannel(out))) {
        writer.start();
        writer.writeBatch();
        writer.end();
      }
      data = out.toByteArray();
    } catch (IOException e) {
      throw new IllegalStateException("cannot serialize rows for raylog: " + e, e);
    } finally {
      root.close();
      root = null;
    }
    while (inFlight.size() >= IN_FLIGHT) {
      acknowledged(inFlight.removeFirst());
    }
    inFlight.addLast(new Sent(data, submit(data)));
  }

  private ObjectRef<String> submit(byte[] data) {
    if (gateway == null) {
      gateway = cluster.writerFor(Cluster.nodeId());
    }
    return cluster.write(gateway, settings.topic == null ? "" : settings.topic,
        producerSettings, data);
  }

  /** Waits for a batch's acknowledgement; a lost gateway is replaced and the batch sent again
   * (at least once, as Spark's Kafka sink). */
  private void acknowledged(Sent sent) {
    long deadline = System.currentTimeMillis() + settings.timeoutMs;
    while (true) {
      try {
        String answer = Cluster.await(sent.ref, settings.timeoutMs);
        written += Cluster.json(answer).path("records").asLong();
        return;
      } catch (RaylogException e) {
        boolean gatewayLost = e.type.equals(RaylogException.ACTOR_LOST);
        if (gatewayLost) {
          cluster.forget(gateway, null); // the next call, or attempt, asks for a new one
        }
        // A transaction is lost with its gateway: the task fails, and its next attempt
        // begins it again (fencing what was left).
        if (!gatewayLost || transactionalId != null || System.currentTimeMillis() >= deadline) {
          throw e;
        }
        LOG.info("the writer gateway {} was lost ({}): sending the batch again", gateway,
            e.toString());
        gateway = null;
        Cluster.sleep(Cluster.RETRY_BACKOFF_MS);
        sent.ref = submit(sent.rows);
      }
    }
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    send();
    while (!inFlight.isEmpty()) {
      acknowledged(inFlight.removeFirst());
    }
    if (begun && batchId < 0) {
      // A batch write's task prepares its transaction for the driver's joint commit; the
      // gateway holds nothing of it after (a failure to leaves it there, to abort).
      com.fasterxml.jackson.databind.JsonNode answer =
          cluster.prepareTransaction(gateway, transactionalId, settings.timeoutMs);
      prepared = true;
      return answer.has("producer_id") ? new Written(written, gateway, transactionalId,
          answer.get("producer_id").asLong(), answer.get("producer_epoch").asInt())
          : new Written(written);
    }
    prepared = true;
    return begun ? new Written(written, gateway, transactionalId) : new Written(written);
  }

  @Override
  public void abort() {
    if (begun && !prepared) {
      begun = false;
      try {
        cluster.endTransaction(gateway, transactionalId, "abort", settings.timeoutMs);
      } catch (RaylogException e) {
        // the next attempt's begin, or the driver's abort, fences it
        LOG.warn("could not abort the transaction of {}: {}", transactionalId, e.toString());
      }
    }
    inFlight.clear(); // what was sent may be written: at least once, as Kafka's sink
    if (root != null) {
      root.close();
      root = null;
    }
  }

  @Override
  public void close() {
    abort();
    allocator.close();
  }
}
