package io.raylog.spark;

import java.io.Serializable;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.Schema;
import org.apache.avro.AvroRuntimeException;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.MetadataBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import scala.Option;

/**
 * {@code valueFormat} {@code avro}: the query's one reader schema, and what a task needs to
 * decode values with it. The reader schema is fixed when the source's schema is made (on the
 * driver, when the DataFrame is loaded or the stream starts): the text given inline, or the
 * registry's version of the subject then. It travels with the schema itself, in the
 * {@code value} field's metadata (key {@value #READER_SCHEMA}), so the scan that Spark plans
 * from that schema decodes into exactly the type it announced. Writer schemas come from the
 * registry by id, once per id per JVM (an id never changes its schema).
 */
final class AvroValues implements Serializable {
  private static final long serialVersionUID = 1L;
  static final String READER_SCHEMA = "avroReaderSchema";
  private static final Map<Integer, Schema> WRITERS = new ConcurrentHashMap<>();

  final String readerSchema;
  final boolean errorsAsNull;

  AvroValues(String readerSchema, boolean errorsAsNull) {
    this.readerSchema = readerSchema;
    this.errorsAsNull = errorsAsNull;
  }

  /** The source's schema for these options: Kafka's, with {@code value} of the reader
   * schema's type when the value format is avro (asking the registry for it now). */
  static StructType sourceSchema(Map<String, String> options) {
    StructType kafka = KafkaSchema.schema(RaylogOptions.includeHeaders(options));
    RaylogOptions.ValueFormat format = RaylogOptions.valueFormat(options);
    if (!format.avro) {
      return kafka;
    }
    if (format.schema != null) {
      return typed(kafka, format.schema, "option 'valueSchema'");
    }
    String text = Cluster.get().schemaVersion(format.subject, format.version);
    return typed(kafka, text, "version " + format.version + " of subject " + format.subject);
  }

  /** {@code kafka} with {@code value} of {@code readerSchema}'s type, which must be one. */
  static StructType typed(StructType kafka, String readerSchema, String source) {
    Schema reader = parse(readerSchema, "the reader schema (" + source + ")");
    Metadata metadata = new MetadataBuilder().putString(READER_SCHEMA, readerSchema).build();
    StructField[] fields = kafka.fields().clone();
    int value = kafka.fieldIndex("value");
    try {
      fields[value] = new StructField("value", AvroTypes.sparkType(reader), true, metadata);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(e.getMessage() + " (the reader schema is " + source
          + ")", e);
    }
    return new StructType(fields);
  }

  /** What the tasks of a scan of {@code schema} need to decode its values; null when it
   * reads none or reads them as bytes. */
  static AvroValues of(StructType schema, RaylogOptions options) {
    Option<Object> at = schema.getFieldIndex("value");
    if (at.isEmpty()) {
      return null;
    }
    Metadata metadata = schema.fields()[(Integer) at.get()].metadata();
    return metadata.contains(READER_SCHEMA) ? new AvroValues(metadata.getString(READER_SCHEMA),
        options.valueFormat.errorsAsNull) : null;
  }

  /** A task's decoder, with writer schemas from the registry. */
  AvroDecoder decoder() {
    return new AvroDecoder(parse(readerSchema, "the reader schema"), AvroValues::writer,
        errorsAsNull);
  }

  /** The writer schema of id {@code id}, from the registry once per JVM; a RaylogException of
   * type SchemaNotFoundError for an id it does not know. */
  static Schema writer(int id) {
    return WRITERS.computeIfAbsent(id, k -> parse(Cluster.get().schemaById(k),
        "the writer schema of id " + k));
  }

  static Schema parse(String text, String what) {
    try {
      return new Schema.Parser().parse(text);
    } catch (AvroRuntimeException e) { // SchemaParseException, AvroTypeException (defaults)
      throw new IllegalArgumentException(what + " is not an Avro schema that Avro's Java library"
          + " reads: " + e.getMessage(), e);
    }
  }
}
