package io.raylog.spark;

import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertThrows;
import static io.raylog.spark.Check.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Iterator;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * The stored-batch decoder against raylog's own encoder and read path: the fixtures
 * (raylog.integrations.spark.build.write_batch_fixtures, written fresh for every run) hold an LZ4 batch and
 * an uncompressed compacted one, and what Python's read_table + spark_table make of each
 * [start, end); the decoder must give the same rows, column for column.
 */
public final class BatchDecoderTest {
  private static final String[] COLUMNS = {"key", "value", "topic", "partition", "offset",
      "timestamp", "timestampType", "headers"};
  private static final JsonNodeFactory JSON = JsonNodeFactory.instance;

  private static Path fixtures() {
    String dir = System.getProperty("raylog.test.fixtures");
    if (dir == null) {
      fail("run through `python -m raylog.integrations.spark.build --test`, which writes the fixtures");
    }
    return Paths.get(dir);
  }

  public static void testRowsMatchThePythonReadPath() throws Exception {
    byte[] chunk = Files.readAllBytes(fixtures().resolve("chunk.bin"));
    JsonNode expected = OffsetsJson.MAPPER.readTree(
        Files.readAllBytes(fixtures().resolve("expected.json")));
    int ranges = 0;
    for (Iterator<Map.Entry<String, JsonNode>> it = expected.fields(); it.hasNext(); ranges++) {
      Map.Entry<String, JsonNode> e = it.next();
      String[] bounds = e.getKey().split("-");
      ArrayNode got = decode(chunk, Long.parseLong(bounds[0]), Long.parseLong(bounds[1]));
      assertEquals(e.getValue().toString(), got.toString(), "rows of [" + e.getKey() + ")");
    }
    assertEquals(5, ranges);
  }

  public static void testACorruptBatchIsRefused() throws Exception {
    byte[] corrupt = Files.readAllBytes(fixtures().resolve("corrupt.bin"));
    RaylogException e = assertThrows(RaylogException.class, () -> decode(corrupt, 100, 105),
        "CRC32C");
    assertEquals("CorruptRecordError", e.type);
    byte[] truncated = java.util.Arrays.copyOf(corrupt, 40);
    assertThrows(RaylogException.class, () -> decode(truncated, 100, 105), "truncated");
  }

  private static ArrayNode decode(byte[] chunk, long start, long end) throws Exception {
    ArrayNode rows = JSON.arrayNode();
    try (BufferAllocator allocator = RangeReader.ROOT.newChildAllocator("test", 0, 1L << 30);
        BatchDecoder decoder = new BatchDecoder(chunk, new TopicPartition("t", 4), start, end,
            COLUMNS, allocator, null)) {
      for (ColumnarBatch batch = decoder.next(); batch != null; batch = decoder.next()) {
        for (int r = 0; r < batch.numRows(); r++) {
          rows.add(row(batch.getRow(r)));
        }
      }
    }
    return rows;
  }

  private static ObjectNode row(InternalRow r) {
    ObjectNode row = JSON.objectNode();
    row.put("key", r.isNullAt(0) ? null : hex(r.getBinary(0)));
    row.put("value", r.isNullAt(1) ? null : hex(r.getBinary(1)));
    row.put("topic", r.getUTF8String(2).toString());
    row.put("partition", r.getInt(3));
    row.put("offset", r.getLong(4));
    row.put("timestamp", r.getLong(5));
    row.put("timestampType", r.getInt(6));
    if (r.isNullAt(7)) {
      row.putNull("headers");
    } else {
      ArrayNode headers = row.putArray("headers");
      ColumnarArray array = (ColumnarArray) r.getArray(7);
      for (int i = 0; i < array.numElements(); i++) {
        InternalRow header = array.getStruct(i, 2);
        ArrayNode pair = headers.addArray();
        pair.add(header.getUTF8String(0).toString());
        pair.add(header.isNullAt(1) ? null : hex(header.getBinary(1)));
      }
    }
    return row;
  }

  private static String hex(byte[] bytes) {
    StringBuilder out = new StringBuilder();
    for (byte b : bytes) {
      out.append(String.format("%02x", b));
    }
    return out.toString();
  }
}
