package io.raylog.spark;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntFunction;
import java.util.function.IntToLongFunction;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.ResolvingDecoder;
import org.apache.avro.util.Utf8;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Decodes a batch's values, in Confluent's wire format (magic byte 0, the writer schema's
 * 4-byte big-endian id, the value in Avro's binary encoding), into one Spark column of the
 * reader schema's type ({@link AvroTypes}). Each value's writer schema is resolved against the
 * reader schema by Avro's own {@link ResolvingDecoder} (fields added with defaults, removed,
 * reordered or renamed by alias, type promotions, enum defaults), one resolver per writer id,
 * and read straight into Spark's column vectors: no record object per value. The column is
 * reused from batch to batch (Spark is done with a batch before it asks for the next).
 *
 * <p>A null value (a tombstone) is a null row. A value not in the wire format, or whose schema
 * id the registry does not know, fails the task with its topic, partition and offset, or reads
 * as null with {@code errorsAsNull}; a value that does not decode always fails (its row would
 * be half written). Not thread-safe: one per task.
 */
final class AvroDecoder implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(AvroDecoder.class);
  static final byte MAGIC = 0;
  static final int HEADER = 5;
  static final int FIRST_CAPACITY = 4096;

  /** Reads one value of a reader type from the decoder onto the end of a column. */
  @FunctionalInterface
  private interface Reader {
    void read(ResolvingDecoder in, WritableColumnVector out) throws IOException;
  }

  private final Schema reader;
  private final IntFunction<Schema> writers;
  private final boolean errorsAsNull;
  private final Reader root;
  private final WritableColumnVector column;
  private final Map<Integer, ResolvingDecoder> resolvers = new HashMap<>();
  private final Map<Integer, String> unknown = new HashMap<>(); // ids the registry refused: why
  private BinaryDecoder binary;
  private byte[] value = new byte[1024];
  private Utf8 utf8 = new Utf8();
  private ByteBuffer bytes;
  private long nulled; // values read as null by errorsAsNull

  /** {@code writers} gives the schema of a writer id, or throws a RaylogException of type
   * SchemaNotFoundError for an id the registry does not know. */
  AvroDecoder(Schema reader, IntFunction<Schema> writers, boolean errorsAsNull) {
    this.reader = reader;
    this.writers = writers;
    this.errorsAsNull = errorsAsNull;
    this.column = new OnHeapColumnVector(FIRST_CAPACITY, AvroTypes.sparkType(reader));
    this.root = compile(reader);
  }

  /** Rows [lo, lo + n) of {@code values} decoded; {@code offsetOf} gives a row's offset (for
   * messages). The column returned is overwritten by the next call. */
  WritableColumnVector decode(VarBinaryVector values, int lo, int n, TopicPartition tp,
      IntToLongFunction offsetOf) {
    column.reset();
    column.reserve(n);
    for (int row = lo; row < lo + n; row++) {
      if (values.isNull(row)) {
        appendNull(column);
        continue;
      }
      int length = values.getValueLength(row);
      if (value.length < length) {
        value = new byte[Math.max(length, value.length * 2)];
      }
      values.getDataBuffer().getBytes(values.getStartOffset(row), value, 0, length);
      decodeOne(length, tp, offsetOf, row);
    }
    return column;
  }

  private void decodeOne(int length, TopicPartition tp, IntToLongFunction offsetOf, int row) {
    if (length < HEADER || value[0] != MAGIC) {
      unreadable(tp, offsetOf, row, "is not in Confluent's wire format (magic byte 0, then a "
          + "4-byte schema id): " + length + " bytes, the first "
          + (length == 0 ? "none" : String.format("0x%02x", value[0])));
      return;
    }
    int id = ByteBuffer.wrap(value, 1, 4).getInt();
    ResolvingDecoder resolver = resolver(id, tp, offsetOf, row);
    if (resolver == null) {
      unreadable(tp, offsetOf, row, "carries schema id " + id + ", which the schema registry "
          + "does not know (" + unknown.get(id) + ")");
      return;
    }
    binary = DecoderFactory.get().binaryDecoder(value, HEADER, length - HEADER, binary);
    try {
      resolver.configure(binary);
      root.read(resolver, column);
      resolver.drain();
    } catch (IOException | RuntimeException e) {
      throw failed(tp, offsetOf, row, id, e);
    }
  }

  /** The resolver of the writer schema {@code id} against the reader's, made once; null for
   * an id the registry does not know, which is asked for once too (not once per value). */
  private ResolvingDecoder resolver(int id, TopicPartition tp, IntToLongFunction offsetOf,
      int row) {
    ResolvingDecoder resolver = resolvers.get(id);
    if (resolver != null || unknown.containsKey(id)) {
      return resolver;
    }
    Schema writer;
    try {
      writer = writers.apply(id);
    } catch (RaylogException e) {
      if (!"SchemaNotFoundError".equals(e.type)) {
        throw e;
      }
      unknown.put(id, e.getMessage());
      return null;
    }
    try {
      resolver = DecoderFactory.get().resolvingDecoder(Schema.applyAliases(writer, reader),
          reader, null);
    } catch (IOException | RuntimeException e) {
      throw failed(tp, offsetOf, row, id, e);
    }
    resolvers.put(id, resolver);
    return resolver;
  }

  private void unreadable(TopicPartition tp, IntToLongFunction offsetOf, int row, String why) {
    String what = where(tp, offsetOf, row) + ": the value " + why;
    if (!errorsAsNull) {
      throw new RaylogException("SerializationError", what + " (option valueFormatErrors=null "
          + "reads such values as null)", false, null);
    }
    if (nulled++ == 0) {
      LOG.warn("{}; read as null (valueFormatErrors=null), as is any such value of this task",
          what);
    }
    appendNull(column);
  }

  private static RaylogException failed(TopicPartition tp, IntToLongFunction offsetOf, int row,
      int id, Exception e) {
    return new RaylogException("SerializationError", where(tp, offsetOf, row) + ": the value, "
        + "written with schema id " + id + ", cannot be read with the reader schema: " + e, false,
        e);
  }

  private static String where(TopicPartition tp, IntToLongFunction offsetOf, int row) {
    return tp + " at offset " + offsetOf.applyAsLong(row);
  }

  /** A null row: a struct's children get a (null) row too. */
  private static void appendNull(WritableColumnVector out) {
    if (out.dataType() instanceof StructType) {
      out.appendStruct(true);
    } else {
      out.appendNull();
    }
  }

  /** The reader of values of {@code s} (a reader schema), converted as {@link AvroTypes}
   * types them. */
  private Reader compile(Schema s) {
    LogicalType logical = s.getLogicalType();
    switch (s.getType()) {
      case BOOLEAN:
        return (in, out) -> out.appendBoolean(in.readBoolean());
      case INT: // a date is its days since the epoch, as Spark holds one
        return (in, out) -> out.appendInt(in.readInt());
      case LONG:
        if (logical instanceof LogicalTypes.TimestampMillis
            || logical instanceof LogicalTypes.LocalTimestampMillis) {
          return (in, out) -> out.appendLong(Math.multiplyExact(in.readLong(), 1000L));
        }
        return (in, out) -> out.appendLong(in.readLong()); // micros, as Spark holds time
      case FLOAT:
        return (in, out) -> out.appendFloat(in.readFloat());
      case DOUBLE:
        return (in, out) -> out.appendDouble(in.readDouble());
      case STRING:
        return (in, out) -> {
          utf8 = in.readString(utf8);
          out.appendByteArray(utf8.getBytes(), 0, utf8.getByteLength());
        };
      case ENUM: {
        List<String> symbols = s.getEnumSymbols();
        byte[][] utf8Symbols = new byte[symbols.size()][];
        for (int i = 0; i < utf8Symbols.length; i++) {
          utf8Symbols[i] = symbols.get(i).getBytes(StandardCharsets.UTF_8);
        }
        return (in, out) -> {
          byte[] symbol = utf8Symbols[in.readEnum()];
          out.appendByteArray(symbol, 0, symbol.length);
        };
      }
      case BYTES: {
        DecimalReader decimal = DecimalReader.of(logical);
        return (in, out) -> {
          bytes = in.readBytes(bytes);
          int at = bytes.arrayOffset() + bytes.position();
          if (decimal == null) {
            out.appendByteArray(bytes.array(), at, bytes.remaining());
          } else {
            decimal.append(out, new BigInteger(bytes.array(), at, bytes.remaining()));
          }
        };
      }
      case FIXED: {
        DecimalReader decimal = DecimalReader.of(logical);
        byte[] fixed = new byte[s.getFixedSize()];
        return (in, out) -> {
          in.readFixed(fixed, 0, fixed.length);
          if (decimal == null) {
            out.appendByteArray(fixed, 0, fixed.length);
          } else {
            decimal.append(out, new BigInteger(fixed));
          }
        };
      }
      case ARRAY: {
        Reader item = compile(s.getElementType());
        return (in, out) -> {
          WritableColumnVector items = out.arrayData();
          int offset = items.getElementsAppended();
          for (long n = in.readArrayStart(); n != 0; n = in.arrayNext()) {
            for (long i = 0; i < n; i++) {
              item.read(in, items);
            }
          }
          out.putArray(out.appendNotNull(), offset, items.getElementsAppended() - offset);
        };
      }
      case MAP: {
        Reader entry = compile(s.getValueType());
        return (in, out) -> {
          WritableColumnVector keys = out.getChild(0);
          WritableColumnVector values = out.getChild(1);
          int offset = keys.getElementsAppended();
          for (long n = in.readMapStart(); n != 0; n = in.mapNext()) {
            for (long i = 0; i < n; i++) {
              utf8 = in.readString(utf8);
              keys.appendByteArray(utf8.getBytes(), 0, utf8.getByteLength());
              entry.read(in, values);
            }
          }
          out.putArray(out.appendNotNull(), offset, keys.getElementsAppended() - offset);
        };
      }
      case RECORD: {
        Reader[] fields = new Reader[s.getFields().size()];
        for (Schema.Field f : s.getFields()) {
          fields[f.pos()] = compile(f.schema());
        }
        return (in, out) -> {
          out.appendStruct(false);
          // The writer's order; fields only the reader has come with their defaults.
          for (Schema.Field f : in.readFieldOrder()) {
            fields[f.pos()].read(in, out.getChild(f.pos()));
          }
        };
      }
      case UNION:
        return union(s);
      default: // NULL: AvroTypes refuses it outside a union
        throw new IllegalArgumentException("no Spark column for Avro type " + s.getType());
    }
  }

  /** A union's reader: the branch written (as the reader's index) picks the branch reader. */
  private Reader union(Schema s) {
    List<Schema> branches = s.getTypes();
    AvroTypes.UnionKind kind = AvroTypes.unionKind(s);
    int members = AvroTypes.nonNull(s).size();
    Reader[] readers = new Reader[branches.size()];
    int member = 0;
    for (int b = 0; b < readers.length; b++) {
      Schema branch = branches.get(b);
      Schema.Type type = branch.getType();
      if (type == Schema.Type.NULL) {
        readers[b] = (in, out) -> {
          in.readNull();
          appendNull(out);
        };
        continue;
      }
      switch (kind) {
        case LONG:
          readers[b] = type == Schema.Type.INT ? (in, out) -> out.appendLong(in.readInt())
              : (in, out) -> out.appendLong(in.readLong());
          break;
        case DOUBLE:
          readers[b] = type == Schema.Type.FLOAT ? (in, out) -> out.appendDouble(in.readFloat())
              : (in, out) -> out.appendDouble(in.readDouble());
          break;
        case MEMBERS: {
          Reader inner = compile(branch);
          int index = member;
          readers[b] = (in, out) -> {
            out.appendStruct(false);
            for (int m = 0; m < members; m++) {
              if (m == index) {
                inner.read(in, out.getChild(m));
              } else {
                appendNull(out.getChild(m));
              }
            }
          };
          break;
        }
        default:
          readers[b] = compile(branch);
      }
      member++;
    }
    return (in, out) -> readers[in.readIndex()].read(in, out);
  }

  /** Decimals of one precision and scale, appended as Spark's column vectors hold them
   * (refused, as Spark's from_avro refuses them, with more digits than the type has). */
  private static final class DecimalReader {
    private final int precision;
    private final int scale;
    private final BigInteger limit;

    private DecimalReader(LogicalTypes.Decimal type) {
      this.precision = type.getPrecision();
      this.scale = type.getScale();
      this.limit = BigInteger.TEN.pow(precision);
    }

    static DecimalReader of(LogicalType logical) {
      return logical instanceof LogicalTypes.Decimal
          ? new DecimalReader((LogicalTypes.Decimal) logical) : null;
    }

    void append(WritableColumnVector out, BigInteger unscaled) {
      if (unscaled.abs().compareTo(limit) >= 0) {
        throw new ArithmeticException("the decimal " + unscaled + "E-" + scale
            + " has more than the " + precision + " digits of its type");
      }
      if (precision <= Decimal.MAX_INT_DIGITS()) {
        out.appendInt(unscaled.intValue());
      } else if (precision <= Decimal.MAX_LONG_DIGITS()) {
        out.appendLong(unscaled.longValue());
      } else {
        byte[] b = unscaled.toByteArray();
        out.appendByteArray(b, 0, b.length);
      }
    }
  }

  @Override
  public void close() {
    column.close();
  }
}
