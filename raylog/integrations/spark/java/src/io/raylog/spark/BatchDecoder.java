package io.raylog.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.zip.CRC32C;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Decodes raylog's stored batches (raylog/records/header.py and payload.py) into Spark's
 * ColumnarBatches: each batch's 65-byte header is parsed and both CRC32C checksums checked,
 * its payload (an Arrow IPC stream, LZ4 frame compressed or not) is read into Arrow vectors,
 * and the rows of offsets [start, end) become one ColumnarBatch of the requested columns:
 * {@code key}, {@code value} and {@code headers} over the Arrow vectors as they are,
 * {@code offset} and {@code timestamp} (microseconds) computed, {@code topic},
 * {@code partition} and {@code timestampType} constant. The broker only reads the file; the
 * bytes cross compressed, and no record is converted one by one, except values read with
 * {@code valueFormat} {@code avro}: those are decoded by an {@link AvroDecoder} into column
 * vectors of the reader schema's type.
 */
final class BatchDecoder implements AutoCloseable {
  static final int HEADER_SIZE = 65;
  static final int LENGTH_PREFIX = 12;
  static final byte MAGIC = 1;
  static final int CODEC_MASK = 0x07;
  static final int TIMESTAMP_TYPE_BIT = 0x08;
  static final int EXPLICIT_OFFSETS_BIT = 0x10;

  private final byte[] data;
  private final TopicPartition tp;
  private final long start;
  private final long end;
  private final String[] columns;
  private final BufferAllocator allocator;
  private final AvroDecoder avro; // values decoded from Avro; null: values as bytes
  private int pos;
  private ArrowStreamReader reader; // the batch Spark holds now

  BatchDecoder(byte[] data, TopicPartition tp, long start, long end, String[] columns,
      BufferAllocator allocator, AvroDecoder avro) {
    this.data = data;
    this.tp = tp;
    this.start = start;
    this.end = end;
    this.columns = columns;
    this.allocator = allocator;
    this.avro = avro;
  }

  /** The next batch's rows within [start, end), or null after the last. */
  ColumnarBatch next() throws IOException {
    while (pos < data.length) {
      closeReader();
      int at = pos;
      Header h = header(at);
      pos = at + h.size;
      if (h.lastOffset() < start) {
        continue;
      }
      if (h.baseOffset >= end) {
        pos = data.length;
        return null;
      }
      ColumnarBatch batch = decode(h, at);
      if (batch.numRows() > 0) {
        return batch;
      }
    }
    closeReader();
    return null;
  }

  /** The header of the batch at {@code at}, checked (framing, magic, both CRCs). */
  private Header header(int at) {
    if (data.length - at < HEADER_SIZE) {
      throw corrupt(at, "a truncated batch header");
    }
    ByteBuffer b = ByteBuffer.wrap(data, at, HEADER_SIZE); // big-endian, as written
    Header h = new Header();
    h.baseOffset = b.getLong(at);
    int length = b.getInt(at + 8);
    h.size = length + LENGTH_PREFIX;
    if (length < HEADER_SIZE - LENGTH_PREFIX || h.size > data.length - at) {
      throw corrupt(at, "a batch length of " + length + " that does not fit");
    }
    if (data[at + 16] != MAGIC) {
      throw corrupt(at, "magic " + data[at + 16]);
    }
    if (crc(at, at + 17) != b.getInt(at + 17) || crc(at + 25, at + h.size) != b.getInt(at + 21)) {
      throw corrupt(at, "a CRC32C mismatch");
    }
    h.attributes = b.getShort(at + 25) & 0xFFFF;
    h.lastOffsetDelta = b.getInt(at + 27);
    h.recordCount = b.getInt(at + 61);
    return h;
  }

  private int crc(int from, int until) {
    CRC32C crc = new CRC32C();
    crc.update(data, from, until - from);
    return (int) crc.getValue();
  }

  private ColumnarBatch decode(Header h, int at) throws IOException {
    InputStream payload = new ByteArrayInputStream(data, at + HEADER_SIZE, h.size - HEADER_SIZE);
    int codec = h.attributes & CODEC_MASK;
    if (codec == 1) {
      payload = new LZ4FrameInputStream(payload);
    } else if (codec != 0) {
      throw corrupt(at, "codec " + codec);
    }
    reader = new ArrowStreamReader(payload, allocator);
    VectorSchemaRoot root = reader.getVectorSchemaRoot();
    if (!reader.loadNextBatch() || root.getRowCount() != h.recordCount) {
      throw corrupt(at, "a payload without its " + h.recordCount + " records");
    }
    boolean explicit = (h.attributes & EXPLICIT_OFFSETS_BIT) != 0;
    List<FieldVector> fields = root.getFieldVectors();
    if (fields.size() != (explicit ? 5 : 4)) {
      throw corrupt(at, "a payload of " + fields.size() + " columns");
    }
    if (avro != null && !(fields.get(2) instanceof VarBinaryVector)) {
      throw corrupt(at, "a value column of Arrow type " + fields.get(2).getField().getType());
    }
    IntVector deltas = explicit ? (IntVector) fields.get(4) : null;
    int rows = root.getRowCount();
    int lo = rowOf(h, deltas, rows, start);
    int hi = rowOf(h, deltas, rows, end);
    int n = hi - lo;
    ColumnVector[] out = new ColumnVector[columns.length];
    for (int c = 0; c < columns.length; c++) {
      out[c] = column(columns[c], h, deltas, fields, lo, n);
    }
    return new ColumnarBatch(out, n);
  }

  /** The first row at or after {@code offset}. */
  private static int rowOf(Header h, IntVector deltas, int rows, long offset) {
    if (deltas == null) { // dense: row i holds base + i
      return (int) Math.max(0, Math.min(rows, offset - h.baseOffset));
    }
    int row = 0;
    while (row < rows && offset(h, deltas, row) < offset) {
      row++;
    }
    return row;
  }

  private static long offset(Header h, IntVector deltas, int row) {
    return h.baseOffset + (deltas == null ? row : deltas.get(row));
  }

  private ColumnVector column(String name, Header h, IntVector deltas, List<FieldVector> fields,
      int lo, int n) {
    switch (name) {
      case "key":
        return arrow(fields.get(1), lo, false);
      case "value":
        if (avro != null) {
          return avro.decode((VarBinaryVector) fields.get(2), lo, n, tp,
              row -> offset(h, deltas, row));
        }
        return arrow(fields.get(2), lo, false);
      case "headers":
        return arrow(fields.get(3), lo, true);
      case "offset": {
        OnHeapColumnVector v = new OnHeapColumnVector(n, DataTypes.LongType);
        for (int i = 0; i < n; i++) {
          v.putLong(i, offset(h, deltas, lo + i));
        }
        return v;
      }
      case "timestamp": {
        OnHeapColumnVector v = new OnHeapColumnVector(n, DataTypes.TimestampType);
        BigIntVector ms = (BigIntVector) fields.get(0);
        for (int i = 0; i < n; i++) {
          v.putLong(i, ms.get(lo + i) * 1000); // Spark's timestamps are microseconds
        }
        return v;
      }
      case "topic": {
        ConstantColumnVector v = new ConstantColumnVector(n, DataTypes.StringType);
        v.setUtf8String(UTF8String.fromString(tp.topic));
        return v;
      }
      case "partition":
        return constant(n, tp.partition);
      case "timestampType":
        return constant(n, (h.attributes & TIMESTAMP_TYPE_BIT) != 0 ? 1 : 0);
      default:
        throw new IllegalArgumentException("raylog has no column named " + name);
    }
  }

  private static ColumnVector arrow(FieldVector vector, int lo, boolean emptyIsNull) {
    ColumnVector rows = new ArrowColumnVector(vector);
    return lo == 0 && !emptyIsNull ? rows : new ShiftedVector(rows, lo, emptyIsNull);
  }

  private static ColumnVector constant(int n, int value) {
    ConstantColumnVector v = new ConstantColumnVector(n, DataTypes.IntegerType);
    v.setInt(value);
    return v;
  }

  private RaylogException corrupt(int at, String what) {
    return new RaylogException("CorruptRecordError", tp + ": the stored batch at byte " + at
        + " of a chunk holds " + what, false, null);
  }

  private void closeReader() throws IOException {
    if (reader != null) {
      reader.close(); // frees the vectors of the batch Spark is done with
      reader = null;
    }
  }

  @Override
  public void close() throws IOException {
    closeReader();
  }

  /** The fields of a batch header the reader needs. */
  private static final class Header {
    long baseOffset;
    int size;
    int attributes;
    int lastOffsetDelta;
    int recordCount;

    long lastOffset() {
      return baseOffset + lastOffsetDelta;
    }
  }
}
