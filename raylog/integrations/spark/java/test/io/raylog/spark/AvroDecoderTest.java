package io.raylog.spark;

import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertThrows;
import static io.raylog.spark.Check.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntFunction;
import org.apache.avro.Conversions;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The decoder of Avro values into Spark columns, over values in Confluent's wire format
 * written by Avro's Java library here and by fastavro (raylog's serializers) in the fixture
 * that raylog.integrations.spark.build writes: each writer schema resolved against the reader's.
 */
public final class AvroDecoderTest {
  private static final JsonNodeFactory JSON = JsonNodeFactory.instance;
  private static final TopicPartition TP = new TopicPartition("t", 4);
  private static final long FIRST_OFFSET = 100;

  static final String USER = "{'type': 'record', 'name': 'User', 'fields': ["
      + "{'name': 'id', 'type': 'int'}, {'name': 'name', 'type': 'string'},"
      + "{'name': 'kind', 'type': {'type': 'enum', 'name': 'Kind', 'symbols': ['A', 'B', 'C']}},"
      + "{'name': 'gone', 'type': 'string'}]}";
  // v2: id promoted to long, a field with a default added first, 'gone' removed, an enum
  // symbol removed with a default for it, and 'name' now 'fullName' with the old as alias.
  static final String USER_V2 = "{'type': 'record', 'name': 'User', 'fields': ["
      + "{'name': 'country', 'type': 'string', 'default': 'NL'},"
      + "{'name': 'id', 'type': 'long'}, {'name': 'fullName', 'type': 'string', 'aliases': "
      + "['name']}, {'name': 'kind', 'type': {'type': 'enum', 'name': 'Kind', 'symbols': ['A', "
      + "'B'], 'default': 'A'}}]}";

  private AvroDecoderTest() {}

  static Schema avro(String json) {
    return AvroTypesTest.avro(json);
  }

  /** {@code value} written with the Java library, framed with {@code id}. */
  static byte[] framed(int id, Schema schema, Object value) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(0);
    out.write(ByteBuffer.allocate(4).putInt(id).array());
    BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
    GenericData data = new GenericData();
    data.addLogicalTypeConversion(new Conversions.DecimalConversion());
    new GenericDatumWriter<Object>(schema, data).write(value, encoder);
    encoder.flush();
    return out.toByteArray();
  }

  static GenericData.Record record(Schema schema, Object... namesAndValues) {
    GenericData.Record r = new GenericData.Record(schema);
    for (int i = 0; i < namesAndValues.length; i += 2) {
      r.put((String) namesAndValues[i], namesAndValues[i + 1]);
    }
    return r;
  }

  static AvroDecoder decoder(String reader, Map<Integer, Schema> writers, boolean errorsAsNull) {
    return new AvroDecoder(avro(reader), registry(writers), errorsAsNull);
  }

  /** Writer schemas by id, as the registry would give them. */
  static IntFunction<Schema> registry(Map<Integer, Schema> writers) {
    return id -> {
      Schema s = writers.get(id);
      if (s == null) {
        throw new RaylogException("SchemaNotFoundError", "Schema " + id + " not found", false,
            null);
      }
      return s;
    };
  }

  /** The rows the decoder makes of {@code values}, as JSON (see {@link #cell}). */
  static ArrayNode decode(AvroDecoder decoder, List<byte[]> values) {
    try (BufferAllocator allocator = RangeReader.ROOT.newChildAllocator("test", 0, 1L << 30);
        VarBinaryVector vector = new VarBinaryVector("value", allocator)) {
      vector.allocateNew();
      for (int i = 0; i < values.size(); i++) {
        if (values.get(i) == null) {
          vector.setNull(i);
        } else {
          vector.setSafe(i, values.get(i));
        }
      }
      vector.setValueCount(values.size());
      // Rows from 1 on: a batch's range may start inside it.
      WritableColumnVector column = decoder.decode(vector, 1, values.size() - 1, TP,
          row -> FIRST_OFFSET + row);
      ColumnarBatch batch = new ColumnarBatch(new ColumnVector[] {column}, values.size() - 1);
      ArrayNode rows = JSON.arrayNode();
      for (int r = 0; r < batch.numRows(); r++) {
        rows.add(cell(batch.getRow(r), 0, column.dataType()));
      }
      return rows;
    }
  }

  /** Values as JSON: bytes as hex, decimals as text, dates as days, timestamps as micros. */
  static JsonNode cell(SpecializedGetters g, int i, DataType t) {
    if (g.isNullAt(i)) {
      return JSON.nullNode();
    } else if (t instanceof BooleanType) {
      return JSON.booleanNode(g.getBoolean(i));
    } else if (t instanceof IntegerType || t instanceof DateType) {
      return JSON.numberNode(g.getInt(i));
    } else if (t instanceof FloatType) {
      return JSON.numberNode((double) g.getFloat(i));
    } else if (t instanceof DoubleType) {
      return JSON.numberNode(g.getDouble(i));
    } else if (t instanceof StringType) {
      return JSON.textNode(g.getUTF8String(i).toString());
    } else if (t instanceof BinaryType) {
      StringBuilder hex = new StringBuilder();
      for (byte b : g.getBinary(i)) {
        hex.append(String.format("%02x", b));
      }
      return JSON.textNode(hex.toString());
    } else if (t instanceof DecimalType) {
      DecimalType d = (DecimalType) t;
      return JSON.textNode(g.getDecimal(i, d.precision(), d.scale()).toJavaBigDecimal()
          .toPlainString());
    } else if (t instanceof StructType) {
      StructField[] fields = ((StructType) t).fields();
      SpecializedGetters row = g.getStruct(i, fields.length);
      ObjectNode out = JSON.objectNode();
      for (int f = 0; f < fields.length; f++) {
        out.set(fields[f].name(), cell(row, f, fields[f].dataType()));
      }
      return out;
    } else if (t instanceof ArrayType) {
      ArrayData array = g.getArray(i);
      ArrayNode out = JSON.arrayNode();
      for (int e = 0; e < array.numElements(); e++) {
        out.add(cell(array, e, ((ArrayType) t).elementType()));
      }
      return out;
    } else if (t instanceof MapType) {
      MapData map = g.getMap(i);
      ObjectNode out = JSON.objectNode();
      for (int e = 0; e < map.numElements(); e++) {
        out.set(map.keyArray().getUTF8String(e).toString(),
            cell(map.valueArray(), e, ((MapType) t).valueType()));
      }
      return out;
    }
    return JSON.numberNode(g.getLong(i)); // long, timestamp, timestamp_ntz
  }

  private static String quoted(String json) {
    return json.replace('\'', '"');
  }

  public static void testEvolvedRecordsResolvedAgainstTheReader() throws Exception {
    Schema v1 = avro(USER);
    Schema v2 = avro(USER_V2);
    Schema kind = v1.getField("kind").schema();
    List<byte[]> values = Arrays.asList(
        framed(1, v1, record(v1, "id", 0, "name", "skipped", "kind", enumOf(kind, "A"),
            "gone", "x")),
        framed(1, v1, record(v1, "id", 7, "name", "ann", "kind", enumOf(kind, "B"), "gone", "y")),
        framed(1, v1, record(v1, "id", 8, "name", "bob", "kind", enumOf(kind, "C"), "gone", "z")),
        framed(2, v2, record(v2, "country", "FR", "id", 1L << 40, "fullName", "cy",
            "kind", enumOf(v2.getField("kind").schema(), "B"))));
    Map<Integer, Schema> writers = new HashMap<>();
    writers.put(1, v1);
    writers.put(2, v2);
    try (AvroDecoder decoder = decoder(USER_V2, writers, false)) {
      assertEquals(quoted("[{'country':'NL','id':7,'fullName':'ann','kind':'B'},"
          + "{'country':'NL','id':8,'fullName':'bob','kind':'A'},"
          + "{'country':'FR','id':1099511627776,'fullName':'cy','kind':'B'}]"),
          decode(decoder, values).toString());
      // The column is reused: a second, shorter batch reads right.
      assertEquals(quoted("[{'country':'FR','id':1099511627776,'fullName':'cy','kind':'B'}]"),
          decode(decoder, values.subList(2, 4)).toString());
    }
  }

  private static GenericData.EnumSymbol enumOf(Schema schema, String symbol) {
    return new GenericData.EnumSymbol(schema, symbol);
  }

  static final String TYPES = "{'type': 'record', 'name': 'T', 'fields': ["
      + "{'name': 'b', 'type': 'boolean'}, {'name': 'f', 'type': 'float'},"
      + "{'name': 'd', 'type': 'double'}, {'name': 'raw', 'type': 'bytes'},"
      + "{'name': 'fx', 'type': {'type': 'fixed', 'name': 'F', 'size': 2}},"
      + "{'name': 'tags', 'type': {'type': 'array', 'items': ['null', 'string']}},"
      + "{'name': 'nested', 'type': {'type': 'array', 'items': {'type': 'array', 'items': 'int'}}},"
      + "{'name': 'm', 'type': {'type': 'map', 'values': {'type': 'record', 'name': 'P', "
      + "'fields': [{'name': 'x', 'type': 'int'}]}}},"
      + "{'name': 'day', 'type': {'type': 'int', 'logicalType': 'date'}},"
      + "{'name': 'ms', 'type': {'type': 'long', 'logicalType': 'timestamp-millis'}},"
      + "{'name': 'us', 'type': {'type': 'long', 'logicalType': 'timestamp-micros'}},"
      + "{'name': 'small', 'type': {'type': 'bytes', 'logicalType': 'decimal', 'precision': 9,"
      + "'scale': 2}},"
      + "{'name': 'big', 'type': {'type': 'fixed', 'name': 'Big', 'size': 16, 'logicalType':"
      + "'decimal', 'precision': 30, 'scale': 3}},"
      + "{'name': 'opt', 'type': ['null', 'string'], 'default': null},"
      + "{'name': 'wide', 'type': ['int', 'long']}, {'name': 'real', 'type': ['float', 'double']},"
      + "{'name': 'any', 'type': ['null', 'string', 'int', 'P']}]}";

  public static void testEveryTypeAsSparksFromAvroReadsIt() throws Exception {
    Schema s = avro(TYPES);
    Schema p = s.getField("m").schema().getValueType();
    Map<String, Object> m = new java.util.LinkedHashMap<>();
    m.put("k1", record(p, "x", 1));
    m.put("k2", record(p, "x", 2));
    GenericData.Record full = record(s, "b", true, "f", 1.5f, "d", -2.25,
        "raw", ByteBuffer.wrap(new byte[] {1, 2, (byte) 0xff}),
        "fx", new GenericData.Fixed(s.getField("fx").schema(), new byte[] {9, 10}),
        "tags", Arrays.asList("a", null), "nested", Arrays.asList(Arrays.asList(1, 2),
            Arrays.asList(), Arrays.asList(3)),
        "m", m, "day", 19000, "ms", 1_700_000_000_123L, "us", 1_700_000_000_123_456L,
        "small", new BigDecimal("-12.34"), "big", new BigDecimal("123456789012345678901.234"),
        "opt", "here", "wide", 5, "real", 0.5f, "any", record(p, "x", 9));
    GenericData.Record sparse = record(s, "b", false, "f", 0f, "d", 0d,
        "raw", ByteBuffer.wrap(new byte[0]),
        "fx", new GenericData.Fixed(s.getField("fx").schema(), new byte[] {0, 0}),
        "tags", Arrays.asList(), "nested", Arrays.asList(), "m", new HashMap<>(), "day", -1,
        "ms", -1L, "us", 0L, "small", new BigDecimal("0.00"), "big", new BigDecimal("-1.000"),
        "opt", null, "wide", 1L << 50, "real", 1e300, "any", "text");
    Map<Integer, Schema> writers = new HashMap<>();
    writers.put(3, s);
    List<byte[]> values = Arrays.asList(null, framed(3, s, full), framed(3, s, sparse), null);
    try (AvroDecoder decoder = decoder(TYPES, writers, false)) {
      ArrayNode rows = decode(decoder, values);
      assertEquals(quoted("{'b':true,'f':1.5,'d':-2.25,'raw':'0102ff','fx':'090a',"
          + "'tags':['a',null],'nested':[[1,2],[],[3]],'m':{'k1':{'x':1},'k2':{'x':2}},"
          + "'day':19000,'ms':1700000000123000,'us':1700000000123456,'small':'-12.34',"
          + "'big':'123456789012345678901.234','opt':'here','wide':5,'real':0.5,"
          + "'any':{'member0':null,'member1':null,'member2':{'x':9}}}"),
          rows.get(0).toString());
      assertEquals(quoted("{'b':false,'f':0.0,'d':0.0,'raw':'','fx':'0000','tags':[],"
          + "'nested':[],'m':{},'day':-1,'ms':-1000,'us':0,'small':'0.00','big':'-1.000',"
          + "'opt':null,'wide':1125899906842624,'real':1.0E300,"
          + "'any':{'member0':'text','member1':null,'member2':null}}"),
          rows.get(1).toString());
      assertEquals("null", rows.get(2).toString(), "a tombstone is a null row");
    }
  }

  public static void testUnreadableValuesFailNamingTheRecord() throws Exception {
    Schema v1 = avro(USER);
    Map<Integer, Schema> writers = new HashMap<>();
    writers.put(1, v1);
    byte[] good = framed(1, v1, record(v1, "id", 1, "name", "a",
        "kind", enumOf(v1.getField("kind").schema(), "A"), "gone", ""));
    byte[] unknownId = good.clone();
    unknownId[4] = 99;
    byte[] notFramed = {'{', '}'};
    byte[] truncated = Arrays.copyOf(good, good.length - 2);
    try (AvroDecoder decoder = decoder(USER, writers, false)) {
      RaylogException e = assertThrows(RaylogException.class,
          () -> decode(decoder, Arrays.asList(null, good, notFramed)),
          "t-4 at offset 102: the value is not in Confluent's wire format");
      assertEquals("SerializationError", e.type);
      assertTrue(e.getMessage().contains("0x7b") && e.getMessage().contains("2 bytes"),
          e.getMessage());
      assertThrows(RaylogException.class, () -> decode(decoder, Arrays.asList(null, unknownId)),
          "t-4 at offset 101: the value carries schema id 99, which the schema registry does "
              + "not know");
      assertThrows(RaylogException.class, () -> decode(decoder, Arrays.asList(null, truncated)),
          "t-4 at offset 101: the value, written with schema id 1, cannot be read");
    }
    Map<Integer, Integer> asked = new HashMap<>();
    IntFunction<Schema> registry = registry(writers);
    try (AvroDecoder decoder = new AvroDecoder(avro(USER), id -> {
      asked.merge(id, 1, Integer::sum);
      return registry.apply(id);
    }, true)) {
      assertEquals(quoted("[{'id':1,'name':'a','kind':'A','gone':''},null,null,null,null]"),
          decode(decoder, Arrays.asList(null, good, notFramed, unknownId, null, unknownId))
              .toString());
      assertEquals(1, asked.get(99), "the registry is asked for an unknown id once");
      assertThrows(RaylogException.class, () -> decode(decoder, Arrays.asList(null, truncated)),
          "cannot be read"); // a half-read value cannot become null
    }
  }

  public static void testAWriterTheReaderCannotReadFails() throws Exception {
    Schema v1 = avro(USER);
    Map<Integer, Schema> writers = new HashMap<>();
    writers.put(1, v1);
    byte[] value = framed(1, v1, record(v1, "id", 1, "name", "a",
        "kind", enumOf(v1.getField("kind").schema(), "A"), "gone", ""));
    String needsPhone = "{'type': 'record', 'name': 'User', 'fields': [{'name': 'phone', "
        + "'type': 'string'}]}";
    try (AvroDecoder decoder = decoder(needsPhone, writers, false)) {
      assertThrows(RaylogException.class, () -> decode(decoder, Arrays.asList(null, value)),
          "phone");
    }
  }

  /** fastavro-written values (raylog's serializers) and what fastavro's own resolution made
   * of them, from raylog.integrations.spark.build.write_avro_fixtures. */
  public static void testValuesWrittenByFastavroReadAsFastavroReadsThem() throws Exception {
    JsonNode fixture = OffsetsJson.MAPPER.readTree(Files.readAllBytes(Paths.get(
        System.getProperty("raylog.test.fixtures")).resolve("avro.json")));
    Map<Integer, Schema> writers = new HashMap<>();
    writers.put(fixture.get("id").asInt(), avro(fixture.get("writer").toString()));
    List<byte[]> values = new java.util.ArrayList<>();
    values.add(null); // the row before the range
    for (JsonNode hex : fixture.get("values")) {
      values.add(hex.isNull() ? null : hexBytes(hex.asText()));
    }
    try (AvroDecoder decoder = decoder(fixture.get("reader").toString(), writers, false)) {
      assertEquals(fixture.get("expected").toString(), decode(decoder, values).toString());
    }
  }

  private static byte[] hexBytes(String hex) {
    byte[] out = new byte[hex.length() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
    }
    return out;
  }

  public static void testDecimalsWiderThanTheirTypeFail() throws Exception {
    String writer = "{'type': 'bytes', 'logicalType': 'decimal', 'precision': 12, 'scale': 2}";
    String reader = "{'type': 'bytes', 'logicalType': 'decimal', 'precision': 4, 'scale': 2}";
    Map<Integer, Schema> writers = new HashMap<>();
    writers.put(1, avro(writer));
    byte[] value = framed(1, avro(writer), new BigDecimal("123.45"));
    assertTrue(LogicalTypes.fromSchema(avro(reader)) instanceof LogicalTypes.Decimal, "decimal");
    try (AvroDecoder decoder = decoder(reader, writers, false)) {
      assertThrows(RaylogException.class, () -> decode(decoder, Arrays.asList(null, value)),
          "has more than the 4 digits");
    }
  }
}
