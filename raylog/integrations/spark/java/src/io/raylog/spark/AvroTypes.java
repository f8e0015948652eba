package io.raylog.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructField;

/**
 * Spark's type for an Avro schema, as Spark's {@code from_avro} ({@code SchemaConverters} in
 * spark-avro, which is not installed here) gives it: boolean, int, long, float, double,
 * string, bytes and fixed (binary), enum (string), array, map (string keys), record (struct),
 * with the logical types date, decimal (bytes or fixed), timestamp-millis/-micros
 * (timestamp), local-timestamp-millis/-micros (timestamp_ntz); time-millis/-micros stay int
 * and long (Spark has no time type), uuid stays string. Unions: {@code [null, T]} is a nullable
 * T, {@code [int, long]} long, {@code [float, double]} double, and any other union a struct
 * with a nullable field {@code member0, member1, ...} per non-null branch, only the branch
 * written set. Only a union with null (or the type null) is nullable. Refused, with the path:
 * a recursive record, the type null outside a union (Spark's column vectors have no null
 * type), and a decimal of more than 38 digits. Plain functions; thread-safe.
 */
final class AvroTypes {
  static final int MAX_DECIMAL_DIGITS = 38;

  private AvroTypes() {}

  /** A Spark type and whether values of it may be null. */
  static final class Converted {
    final DataType type;
    final boolean nullable;

    Converted(DataType type, boolean nullable) {
      this.type = type;
      this.nullable = nullable;
    }
  }

  /** How a union reads (see the class comment). */
  enum UnionKind { NULLABLE, LONG, DOUBLE, MEMBERS }

  /** Spark's type for values of {@code schema}; IllegalArgumentException for what has none. */
  static DataType sparkType(Schema schema) {
    return convert(schema, new HashSet<>(), "").type;
  }

  static Converted convert(Schema s, Set<String> records, String path) {
    LogicalType logical = s.getLogicalType();
    switch (s.getType()) {
      case BOOLEAN:
        return plain(DataTypes.BooleanType);
      case INT:
        return plain(logical instanceof LogicalTypes.Date ? DataTypes.DateType
            : DataTypes.IntegerType);
      case LONG:
        return plain(timestampType(logical, DataTypes.LongType));
      case FLOAT:
        return plain(DataTypes.FloatType);
      case DOUBLE:
        return plain(DataTypes.DoubleType);
      case STRING:
      case ENUM:
        return plain(DataTypes.StringType);
      case BYTES:
      case FIXED:
        return plain(logical instanceof LogicalTypes.Decimal
            ? decimal((LogicalTypes.Decimal) logical, path) : DataTypes.BinaryType);
      case ARRAY: {
        Converted items = convert(s.getElementType(), records, path + "[]");
        return plain(DataTypes.createArrayType(items.type, items.nullable));
      }
      case MAP: {
        Converted values = convert(s.getValueType(), records, path + "{}");
        return plain(DataTypes.createMapType(DataTypes.StringType, values.type, values.nullable));
      }
      case RECORD: {
        if (!records.add(s.getFullName())) {
          throw refused(path, "the record " + s.getFullName() + " contains itself (a recursive "
              + "type), which no Spark type holds");
        }
        List<StructField> fields = new ArrayList<>();
        for (Schema.Field f : s.getFields()) {
          Converted c = convert(f.schema(), records, path + "/" + f.name());
          fields.add(DataTypes.createStructField(f.name(), c.type, c.nullable));
        }
        records.remove(s.getFullName());
        return plain(DataTypes.createStructType(fields));
      }
      case UNION:
        return union(s, records, path);
      case NULL:
      default:
        throw refused(path, "the Avro type " + s.getType().getName() + " outside a union has no "
            + "Spark column type here");
    }
  }

  private static Converted union(Schema s, Set<String> records, String path) {
    List<Schema> branches = nonNull(s);
    boolean nullable = branches.size() < s.getTypes().size();
    if (branches.isEmpty()) {
      throw refused(path, "a union of null only has no Spark column type here");
    }
    switch (unionKind(s)) {
      case NULLABLE: {
        Converted only = convert(branches.get(0), records, path);
        return new Converted(only.type, nullable || only.nullable);
      }
      case LONG:
        return new Converted(DataTypes.LongType, nullable);
      case DOUBLE:
        return new Converted(DataTypes.DoubleType, nullable);
      default: {
        List<StructField> members = new ArrayList<>();
        for (int i = 0; i < branches.size(); i++) {
          Converted c = convert(branches.get(i), records, path + "/member" + i);
          members.add(DataTypes.createStructField("member" + i, c.type, true));
        }
        return new Converted(DataTypes.createStructType(members), nullable);
      }
    }
  }

  /** How values of the union {@code s} read into Spark (see the class comment). */
  static UnionKind unionKind(Schema s) {
    List<Schema> branches = nonNull(s);
    if (branches.size() == 1) {
      return UnionKind.NULLABLE;
    }
    if (branches.size() == 2) {
      Set<Schema.Type> types = new HashSet<>();
      for (Schema b : branches) {
        types.add(b.getType());
      }
      if (types.contains(Schema.Type.INT) && types.contains(Schema.Type.LONG)) {
        return UnionKind.LONG;
      }
      if (types.contains(Schema.Type.FLOAT) && types.contains(Schema.Type.DOUBLE)) {
        return UnionKind.DOUBLE;
      }
    }
    return UnionKind.MEMBERS;
  }

  /** The union's branches other than null, in order. */
  static List<Schema> nonNull(Schema union) {
    List<Schema> out = new ArrayList<>();
    for (Schema b : union.getTypes()) {
      if (b.getType() != Schema.Type.NULL) {
        out.add(b);
      }
    }
    return out;
  }

  private static DataType timestampType(LogicalType logical, DataType otherwise) {
    if (logical instanceof LogicalTypes.TimestampMillis
        || logical instanceof LogicalTypes.TimestampMicros) {
      return DataTypes.TimestampType;
    }
    if (logical instanceof LogicalTypes.LocalTimestampMillis
        || logical instanceof LogicalTypes.LocalTimestampMicros) {
      return DataTypes.TimestampNTZType;
    }
    return otherwise;
  }

  private static DecimalType decimal(LogicalTypes.Decimal d, String path) {
    if (d.getPrecision() > MAX_DECIMAL_DIGITS) {
      throw refused(path, "a decimal of " + d.getPrecision() + " digits is more than Spark's "
          + MAX_DECIMAL_DIGITS);
    }
    return DataTypes.createDecimalType(d.getPrecision(), d.getScale());
  }

  private static Converted plain(DataType type) {
    return new Converted(type, false);
  }

  private static IllegalArgumentException refused(String path, String what) {
    return new IllegalArgumentException("The Avro reader schema cannot be read into Spark at "
        + (path.isEmpty() ? "its top" : path) + ": " + what);
  }
}
