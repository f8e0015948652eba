package io.raylog.spark;

import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertThrows;

import org.apache.avro.Schema;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/** Spark types of Avro schemas, as Spark's from_avro (SchemaConverters) gives them. */
public final class AvroTypesTest {
  private AvroTypesTest() {}

  static Schema avro(String json) {
    return new Schema.Parser().parse(json.replace('\'', '"'));
  }

  private static String sparkType(String json) {
    return AvroTypes.sparkType(avro(json)).catalogString();
  }

  private static String field(String type) {
    return "{'type': 'record', 'name': 'R', 'fields': [{'name': 'f', 'type': " + type + "}]}";
  }

  /** The field's type and nullability, as StructField prints them. */
  private static String fieldOf(String type) {
    StructType s = (StructType) AvroTypes.sparkType(avro(field(type)));
    return s.fields()[0].dataType().catalogString() + (s.fields()[0].nullable() ? "?" : "");
  }

  public static void testPrimitives() {
    assertEquals("boolean", fieldOf("'boolean'"));
    assertEquals("int", fieldOf("'int'"));
    assertEquals("bigint", fieldOf("'long'"));
    assertEquals("float", fieldOf("'float'"));
    assertEquals("double", fieldOf("'double'"));
    assertEquals("string", fieldOf("'string'"));
    assertEquals("binary", fieldOf("'bytes'"));
    assertEquals("binary", fieldOf("{'type': 'fixed', 'name': 'F', 'size': 16}"));
    assertEquals("string", fieldOf("{'type': 'enum', 'name': 'E', 'symbols': ['A', 'B']}"));
    assertEquals("string", sparkType("'string'"));
  }

  public static void testComplexTypes() {
    assertEquals("array<int>", fieldOf("{'type': 'array', 'items': 'int'}"));
    assertEquals("array<int>?", fieldOf("['null', {'type': 'array', 'items': 'int'}]"));
    DataType items = ((StructType) AvroTypes.sparkType(avro(field(
        "{'type': 'array', 'items': ['null', 'string']}")))).fields()[0].dataType();
    assertEquals(true, ((org.apache.spark.sql.types.ArrayType) items).containsNull());
    assertEquals("map<string,double>", fieldOf("{'type': 'map', 'values': 'double'}"));
    assertEquals("struct<id:bigint,name:string,address:struct<zip:string,city:string>>",
        sparkType("{'type': 'record', 'name': 'User', 'fields': [{'name': 'id', 'type': 'long'},"
            + "{'name': 'name', 'type': 'string'}, {'name': 'address', 'type': {'type': 'record',"
            + "'name': 'Address', 'fields': [{'name': 'zip', 'type': 'string'}, {'name': 'city',"
            + "'type': ['null', 'string']}]}}]}"));
  }

  public static void testUnions() {
    assertEquals("string?", fieldOf("['null', 'string']"));
    assertEquals("string?", fieldOf("['string', 'null']"));
    assertEquals("string", fieldOf("['string']"));
    assertEquals("bigint", fieldOf("['int', 'long']"));
    assertEquals("bigint?", fieldOf("['long', 'null', 'int']"));
    assertEquals("double", fieldOf("['float', 'double']"));
    assertEquals("struct<member0:string,member1:int>", fieldOf("['string', 'int']"));
    assertEquals("struct<member0:int,member1:string,member2:struct<a:int>>?",
        fieldOf("['int', 'null', 'string', {'type': 'record', 'name': 'A', 'fields': "
            + "[{'name': 'a', 'type': 'int'}]}]"));
  }

  public static void testLogicalTypes() {
    assertEquals("date", fieldOf("{'type': 'int', 'logicalType': 'date'}"));
    assertEquals("timestamp", fieldOf("{'type': 'long', 'logicalType': 'timestamp-millis'}"));
    assertEquals("timestamp", fieldOf("{'type': 'long', 'logicalType': 'timestamp-micros'}"));
    assertEquals("timestamp_ntz",
        fieldOf("{'type': 'long', 'logicalType': 'local-timestamp-millis'}"));
    assertEquals("timestamp_ntz",
        fieldOf("{'type': 'long', 'logicalType': 'local-timestamp-micros'}"));
    assertEquals("int", fieldOf("{'type': 'int', 'logicalType': 'time-millis'}"));
    assertEquals("bigint", fieldOf("{'type': 'long', 'logicalType': 'time-micros'}"));
    assertEquals("string", fieldOf("{'type': 'string', 'logicalType': 'uuid'}"));
    assertEquals("decimal(9,2)",
        fieldOf("{'type': 'bytes', 'logicalType': 'decimal', 'precision': 9, 'scale': 2}"));
    assertEquals("decimal(20,0)", fieldOf("{'type': 'fixed', 'name': 'D', 'size': 9, "
        + "'logicalType': 'decimal', 'precision': 20}"));
    // Not a valid logical type (Avro ignores it): the underlying type.
    assertEquals("bigint", fieldOf("{'type': 'long', 'logicalType': 'no-such-thing'}"));
  }

  public static void testWhatHasNoSparkTypeIsRefusedWithItsPath() {
    assertThrows(IllegalArgumentException.class, () -> sparkType("{'type': 'record', 'name': "
        + "'Node', 'fields': [{'name': 'next', 'type': ['null', 'Node']}]}"), "/next: the record "
        + "Node contains itself");
    assertThrows(IllegalArgumentException.class, () -> sparkType(field("'null'")),
        "at /f: the Avro type null");
    assertThrows(IllegalArgumentException.class, () -> sparkType(field(
        "{'type': 'bytes', 'logicalType': 'decimal', 'precision': 39}")), "39 digits");
    assertThrows(IllegalArgumentException.class, () -> sparkType(field(
        "{'type': 'array', 'items': {'type': 'map', 'values': 'null'}}")), "/f[]{}");
  }

  public static void testAReaderSchemaTypesTheValueColumn() {
    StructType kafka = KafkaSchema.schema(false);
    String reader = field("'long'").replace('\'', '"');
    StructType typed = AvroValues.typed(kafka, reader, "a test");
    assertEquals("struct<f:bigint>", typed.apply("value").dataType().catalogString());
    assertEquals(true, typed.apply("value").nullable(), "value is nullable (tombstones)");
    assertEquals(reader, typed.apply("value").metadata().getString(AvroValues.READER_SCHEMA));
    assertEquals(kafka.fieldNames().length, typed.fieldNames().length);
    assertEquals("binary", typed.apply("key").dataType().catalogString());
    assertThrows(IllegalArgumentException.class,
        () -> AvroValues.typed(kafka, "{'type': 'nope'}", "option 'valueSchema'"),
        "the reader schema (option 'valueSchema') is not an Avro schema");
    assertThrows(IllegalArgumentException.class,
        () -> AvroValues.typed(kafka, field("'null'").replace('\'', '"'),
            "version 3 of subject s"),
        "(the reader schema is version 3 of subject s)");
  }
}
