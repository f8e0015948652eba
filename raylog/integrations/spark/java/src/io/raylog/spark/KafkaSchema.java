package io.raylog.spark;

import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The schema of Spark's Kafka source, field for field and nullability included. */
public final class KafkaSchema {
  public static final StructType HEADER = new StructType()
      .add("key", DataTypes.StringType, true)
      .add("value", DataTypes.BinaryType, true);
  public static final ArrayType HEADERS = DataTypes.createArrayType(HEADER, true);

  private static final StructType WITHOUT_HEADERS = new StructType()
      .add("key", DataTypes.BinaryType, true)
      .add("value", DataTypes.BinaryType, true)
      .add("topic", DataTypes.StringType, true)
      .add("partition", DataTypes.IntegerType, true)
      .add("offset", DataTypes.LongType, true)
      .add("timestamp", DataTypes.TimestampType, true)
      .add("timestampType", DataTypes.IntegerType, true);
  private static final StructType WITH_HEADERS = WITHOUT_HEADERS.add("headers", HEADERS, true);

  private KafkaSchema() {}

  /** The source's schema: with a {@code headers} column only if {@code includeHeaders}. */
  public static StructType schema(boolean includeHeaders) {
    return includeHeaders ? WITH_HEADERS : WITHOUT_HEADERS;
  }

  /** Column names of {@code schema}, a pruning of the source's schema, in order. */
  public static String[] names(StructType schema) {
    String[] out = new String[schema.fields().length];
    for (int i = 0; i < out.length; i++) {
      StructField field = schema.fields()[i];
      if (!WITH_HEADERS.getFieldIndex(field.name()).isDefined()) {
        throw new IllegalArgumentException("raylog has no column named " + field.name());
      }
      out[i] = field.name();
    }
    return out;
  }

  /** The type of a source column. */
  public static DataType typeOf(String column) {
    return WITH_HEADERS.apply(column).dataType();
  }

  /** Whether a source column is never null in the data (a count of it counts every row). */
  public static boolean neverNull(String column) {
    if (column == null) {
      return false; // an expression, not a column
    }
    switch (column) {
      case "topic":
      case "partition":
      case "offset":
      case "timestamp":
      case "timestampType":
        return true;
      default:
        return false; // key, value and headers are null in records without them
    }
  }
}
