package io.raylog.spark;

import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertFalse;
import static io.raylog.spark.Check.assertThrows;
import static io.raylog.spark.Check.assertTrue;

import java.util.Arrays;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The source's schema is Spark's Kafka source's, field for field. */
public final class KafkaSchemaTest {
  private KafkaSchemaTest() {}

  private static final String[] NAMES = {
    "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"};
  private static final DataType[] TYPES = {
    DataTypes.BinaryType, DataTypes.BinaryType, DataTypes.StringType, DataTypes.IntegerType,
    DataTypes.LongType, DataTypes.TimestampType, DataTypes.IntegerType};

  /** Spark's KafkaRecordToRowConverter.headersType: ArrayType(StructType(key string, value
   * binary)), every default nullable. */
  private static ArrayType sparkHeadersType() {
    return new ArrayType(new StructType(new StructField[] {
      new StructField("key", DataTypes.StringType, true, Metadata.empty()),
      new StructField("value", DataTypes.BinaryType, true, Metadata.empty())}), true);
  }

  private static void checkBaseFields(StructType schema) {
    for (int i = 0; i < NAMES.length; i++) {
      StructField field = schema.fields()[i];
      assertEquals(NAMES[i], field.name(), "field " + i);
      assertEquals(TYPES[i], field.dataType(), "type of " + field.name());
      assertTrue(field.nullable(), field.name() + " is nullable");
      assertEquals(Metadata.empty(), field.metadata(), "metadata of " + field.name());
    }
  }

  public static void testSchemaWithoutHeaders() {
    StructType schema = KafkaSchema.schema(false);
    assertEquals(7, schema.fields().length);
    checkBaseFields(schema);
    assertEquals("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        + "timestamp:timestamp,timestampType:int>", schema.simpleString());
  }

  public static void testSchemaWithHeaders() {
    StructType schema = KafkaSchema.schema(true);
    assertEquals(8, schema.fields().length);
    checkBaseFields(schema);
    StructField headers = schema.fields()[7];
    assertEquals("headers", headers.name());
    assertTrue(headers.nullable(), "headers is nullable");
    assertEquals(sparkHeadersType(), headers.dataType());
    ArrayType type = (ArrayType) headers.dataType();
    assertTrue(type.containsNull(), "a header may be null");
    for (StructField f : ((StructType) type.elementType()).fields()) {
      assertTrue(f.nullable(), "header field " + f.name() + " is nullable");
    }
    assertEquals("array<struct<key:string,value:binary>>", type.simpleString());
  }

  public static void testSchemasEqualSparksKafkaSchema() {
    StructType spark = new StructType();
    for (int i = 0; i < NAMES.length; i++) {
      spark = spark.add(NAMES[i], TYPES[i]);
    }
    assertEquals(spark, KafkaSchema.schema(false));
    assertEquals(spark.add("headers", sparkHeadersType()), KafkaSchema.schema(true));
  }

  public static void testNamesOfPrunedSchema() {
    StructType pruned = new StructType().add("value", DataTypes.BinaryType)
        .add("offset", DataTypes.LongType).add("headers", KafkaSchema.HEADERS);
    assertEquals(Arrays.asList("value", "offset", "headers"),
        Arrays.asList(KafkaSchema.names(pruned)));
    assertEquals(Arrays.asList(NAMES), Arrays.asList(KafkaSchema.names(KafkaSchema.schema(false))));
    assertEquals(0, KafkaSchema.names(new StructType()).length);
  }

  public static void testNamesRefusesUnknownColumns() {
    assertThrows(IllegalArgumentException.class, () -> KafkaSchema.names(
        new StructType().add("value", DataTypes.BinaryType).add("nope", DataTypes.StringType)),
        "raylog has no column named nope");
    // Column names are exact, as the pruned schema Spark gives back is.
    assertThrows(IllegalArgumentException.class,
        () -> KafkaSchema.names(new StructType().add("Value", DataTypes.BinaryType)),
        "raylog has no column named Value");
  }

  public static void testTypeOf() {
    for (int i = 0; i < NAMES.length; i++) {
      assertEquals(TYPES[i], KafkaSchema.typeOf(NAMES[i]), NAMES[i]);
    }
    assertEquals(sparkHeadersType(), KafkaSchema.typeOf("headers"));
  }

  public static void testNeverNull() {
    for (String column : new String[] {"topic", "partition", "offset", "timestamp",
        "timestampType"}) {
      assertTrue(KafkaSchema.neverNull(column), column + " is never null");
    }
    for (String column : new String[] {"key", "value", "headers", "nope", ""}) {
      assertFalse(KafkaSchema.neverNull(column), column + " may be null");
    }
  }

  public static void testNeverNullOfNoColumn() {
    // RaylogScanBuilder asks neverNull(columnOf(count's expression)), and columnOf is null for
    // anything but a plain top-level column (COUNT(partition + 1), a nested field): such a
    // count must simply not be pushed down (false), not fail the query.
    assertFalse(KafkaSchema.neverNull(null), "no column is not a column never null");
  }
}
