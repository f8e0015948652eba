package io.raylog.spark;

import io.ray.api.ObjectRef;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Collections;
import java.util.Deque;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads a task's offset ranges, one after the other, as ColumnarBatches over Arrow vectors,
 * chunk by chunk. A query that needs {@code value} gets each chunk as the stored batches
 * themselves, which the broker reads from its file and this reader checks and decodes
 * ({@link BatchDecoder}): the bytes cross compressed and the broker decodes nothing. Any
 * other query gets an Arrow IPC stream that the broker builds with only the columns it needs,
 * in Spark's layout, so the values never leave the broker. Up to {@link #PREFETCH} chunks are
 * asked for ahead, across the ends of ranges too, so brokers decode them while Spark consumes
 * this one. Chunks are sized by bytes (about {@link #CHUNK_BYTES}) from the record size seen.
 *
 * <p>The replica is an in-sync one on this executor's Ray node if there is one, else the
 * leader. Retriable failures (a broker restarting, a leader moving) are tried again with fresh
 * metadata for up to {@code fetchTimeoutMs}; offsets that are gone follow
 * {@code failOnDataLoss}.
 */
final class RangeReader implements PartitionReader<ColumnarBatch> {
  private static final Logger LOG = LoggerFactory.getLogger(RangeReader.class);
  static final BufferAllocator ROOT = new RootAllocator(Long.MAX_VALUE);
  static final long CHUNK_BYTES = 8L << 20;
  static final long MIN_CHUNK_RECORDS = 1024;
  static final long MAX_CHUNK_RECORDS = 1L << 20;
  static final long FIRST_CHUNK_RECORDS = 8192;
  static final int PREFETCH = 2;
  /** Cold pieces asked for ahead: the node's cold-read gateway fetches each whole segment
   * from the object store (latency more than work), so more of them overlap. */
  static final int COLD_PREFETCH = 6;
  /** Bytes per record last seen in this JVM, so a task's first chunk is sized right too. */
  private static volatile long bytesPerRecord = 0;

  private final Cluster cluster;
  private final List<OffsetRange> ranges;
  private final long[] ends; // each range's end (failOnDataLoss=false may shorten one)
  private final String columns;
  private final String[] columnNames;
  private final boolean noColumns;
  private final boolean stored; // read stored batches (the query needs values) or IPC
  private final boolean failOnDataLoss;
  private final long fetchTimeoutMs;
  private final String isolation; // passed to the broker: read_committed leaves out aborts
  private final String nodeId;
  private final BufferAllocator allocator;
  private final AvroDecoder avro; // decodes the values of stored batches; null: bytes
  private int asking; // the range the next chunk is asked from
  private long cursor; // the first offset of that range not yet asked for
  private long chunkRecords;
  private final Deque<Chunk> pending = new ArrayDeque<>();
  private ArrowStreamReader reader;
  private BatchDecoder decoder;
  private Chunk received; // the chunk whose data was received last
  private ColumnarBatch batch;

  /** An outstanding request for records [start, end) of one range from one broker, or
   * (broker null) from the node's cold-read gateway {@code gateway}, reading the store. */
  private static final class Chunk {
    final int range;
    final long start;
    final long end;
    final Cluster.BrokerInfo broker;
    final String gateway;
    final ObjectRef<byte[]> ref;

    Chunk(int range, long start, long end, Cluster.BrokerInfo broker, String gateway,
        ObjectRef<byte[]> ref) {
      this.range = range;
      this.start = start;
      this.end = end;
      this.broker = broker;
      this.gateway = gateway;
      this.ref = ref;
    }
  }

  RangeReader(List<OffsetRange> ranges, String[] columns, boolean failOnDataLoss,
      long fetchTimeoutMs, String isolation, AvroValues avroValues) {
    this.cluster = Cluster.get();
    this.ranges = ranges;
    this.ends = new long[ranges.size()];
    for (int i = 0; i < ends.length; i++) {
      ends[i] = ranges.get(i).end;
    }
    this.cursor = ranges.isEmpty() ? 0 : ranges.get(0).start;
    this.columns = String.join(",", columns);
    this.columnNames = columns.clone();
    this.noColumns = columns.length == 0;
    this.stored = Arrays.asList(columns).contains("value");
    this.avro = stored && avroValues != null ? avroValues.decoder() : null;
    this.failOnDataLoss = failOnDataLoss;
    this.fetchTimeoutMs = fetchTimeoutMs;
    this.isolation = isolation;
    this.nodeId = Cluster.nodeId();
    this.allocator = ROOT.newChildAllocator("raylog " + ranges, 0, Long.MAX_VALUE);
    long seen = bytesPerRecord;
    this.chunkRecords = seen == 0 ? FIRST_CHUNK_RECORDS : recordsFor(seen);
  }

  private static long recordsFor(long bytesPerRecord) {
    return Math.max(MIN_CHUNK_RECORDS, Math.min(MAX_CHUNK_RECORDS,
        CHUNK_BYTES / Math.max(1, bytesPerRecord)));
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (decoder != null) {
        batch = decoder.next();
        if (batch != null) {
          return true;
        }
        decoder.close();
        decoder = null;
      }
      if (reader != null && reader.loadNextBatch()) {
        int rows = reader.getVectorSchemaRoot().getRowCount();
        if (rows > 0) {
          batch.setNumRows(rows);
          return true;
        }
        continue;
      }
      closeReader();
      askAhead();
      if (pending.isEmpty()) {
        return false;
      }
      byte[] data = receive();
      if (data == null) {
        continue; // the range moved (data loss skipped): ask again, or end
      }
      askAhead(); // the brokers read those while Spark consumes this one
      if (stored) {
        decoder = new BatchDecoder(data, ranges.get(received.range).tp, received.start,
            received.end, columnNames, allocator, avro);
      } else {
        open(data);
      }
    }
  }

  /** Keeps up to PREFETCH chunks asked for (COLD_PREFETCH while the next is a cold piece),
   * moving on to the next range at each end. */
  private void askAhead() {
    while (asking < ranges.size() && pending.size()
        < (ranges.get(asking).cold != null ? COLD_PREFETCH : PREFETCH)) {
      if (cursor >= ends[asking]) {
        if (++asking < ranges.size()) {
          cursor = ranges.get(asking).start;
        }
        continue;
      }
      pending.addLast(ask(asking, cursor));
    }
  }

  private Chunk ask(int range, long start) {
    TopicPartition tp = ranges.get(range).tp;
    String cold = ranges.get(range).cold;
    if (cold != null) { // one request for the rest of the piece: the segment is fetched once
      long until = ends[range];
      cursor = until;
      String gateway = cluster.coldReader();
      ObjectRef<byte[]> ref;
      try {
        ref = cluster.readCold(gateway, cold, start, until, stored, columns);
      } catch (RaylogException e) { // its name is gone: the controller starts another
        if (!e.type.equals(RaylogException.ACTOR_LOST)) {
          throw e;
        }
        cluster.forgetColdReader(gateway);
        gateway = cluster.coldReader();
        ref = cluster.readCold(gateway, cold, start, until, stored, columns);
      }
      return new Chunk(range, start, until, null, gateway, ref);
    }
    long until = Math.min(ends[range], start + chunkRecords);
    Cluster.TopicInfo info = cluster.topic(tp.topic, false);
    if (tp.partition >= info.partitions.size()) {
      throw new RaylogException("UnknownPartitionError", tp + " does not exist any more", false,
          null);
    }
    Cluster.BrokerInfo broker = info.replicaFor(tp.partition, nodeId);
    int epoch = info.partitions.get(tp.partition).leaderEpoch;
    cursor = until;
    return new Chunk(range, start, until, broker, null, stored
        ? cluster.readBatches(broker, tp, epoch, start, until, isolation)
        : cluster.read(broker, tp, epoch, start, until, columns, isolation));
  }

  /** The first pending chunk's bytes, or null if it had to be given up (the cursor moved). */
  private byte[] receive() {
    long deadline = System.currentTimeMillis() + fetchTimeoutMs;
    while (true) {
      Chunk chunk = pending.removeFirst();
      try {
        byte[] data = Cluster.await(chunk.ref, fetchTimeoutMs);
        if (data == null) {
          data = new byte[0]; // no batch (all aborted, or markers): Ray hands empty as null
        }
        received = chunk;
        long span = chunk.end - chunk.start;
        if (span > 0 && data.length > 0) {
          long perRecord = Math.max(1, data.length / span);
          bytesPerRecord = perRecord;
          chunkRecords = recordsFor(perRecord);
        }
        return data;
      } catch (RaylogException e) {
        pending.clear(); // asked after this one: asked again from here on
        asking = chunk.range;
        cursor = chunk.start;
        TopicPartition tp = ranges.get(chunk.range).tp;
        boolean outOfRange = e.type.equals("OffsetOutOfRangeError");
        if (outOfRange && skipLostOffsets(chunk, e)) {
          return null;
        }
        if (!(e.retriable || outOfRange) || System.currentTimeMillis() >= deadline) {
          throw e;
        }
        LOG.info("reading {} [{}, {}) again after {}", tp, chunk.start, chunk.end, e.toString());
        if (chunk.broker != null) {
          cluster.forget(chunk.broker.actor, tp.topic);
        } else if (e.type.equals(RaylogException.ACTOR_LOST)) { // the cold-read gateway died
          cluster.forgetColdReader(chunk.gateway);
        }
        Cluster.sleep(Cluster.RETRY_BACKOFF_MS);
        cluster.topic(tp.topic, true);
        pending.addLast(ask(asking, cursor));
      }
    }
  }

  /**
   * The chunk asked for offsets the partition does not hold (any more): retention deleted
   * them, or the log was truncated. Fails as failOnDataLoss says, else moves on to what is
   * there. Returns true when the cursor moved (the caller asks anew), false to ask again for
   * the same chunk (the replica was merely behind).
   */
  private boolean skipLostOffsets(Chunk chunk, RaylogException e) {
    TopicPartition tp = ranges.get(chunk.range).tp;
    PartitionOffsets now = cluster.offsets(Collections.singletonList(tp), p -> null,
        fetchTimeoutMs).get(tp);
    boolean lostStart = chunk.start < now.logStart;
    boolean lostEnd = chunk.end > now.latest;
    if (!lostStart && !lostEnd) {
      return false;
    }
    String what = "Cannot read " + tp + " [" + chunk.start + ", " + chunk.end + "): it holds "
        + now + " now (" + e.getMessage() + ").";
    if (failOnDataLoss) {
      throw new RangePlanner.DataLossException(what);
    }
    LOG.warn("{} Going on with what is there (failOnDataLoss is false).", what);
    if (lostEnd) {
      ends[chunk.range] = Math.min(ends[chunk.range], now.latest);
    }
    cursor = Math.min(Math.max(chunk.start, now.logStart), ends[chunk.range]);
    return true;
  }

  private void open(byte[] data) throws IOException {
    reader = new ArrowStreamReader(new ByteArrayInputStream(data), allocator);
    VectorSchemaRoot root = reader.getVectorSchemaRoot();
    List<FieldVector> vectors = root.getFieldVectors();
    ColumnVector[] columns = new ColumnVector[noColumns ? 0 : vectors.size()];
    for (int i = 0; i < columns.length; i++) {
      columns[i] = new ArrowColumnVector(vectors.get(i));
    }
    batch = new ColumnarBatch(columns, 0);
  }

  private void closeReader() throws IOException {
    if (reader != null) {
      reader.close(); // frees the vectors the batch wraps: Spark is done with it
      reader = null;
      batch = null;
    }
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() throws IOException {
    closeReader();
    if (decoder != null) {
      decoder.close();
      decoder = null;
    }
    pending.clear();
    allocator.close();
    if (avro != null) {
      avro.close();
    }
  }
}
