package io.raylog.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** raylog topics as one V2 table: batch and micro-batch reads, streaming writes (batch
 * writes go through {@link RaylogSourceProvider#createRelation}). */
final class RaylogTable implements SupportsRead, SupportsWrite {
  private static final Set<TableCapability> CAPABILITIES = EnumSet.of(
      TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ,
      TableCapability.STREAMING_WRITE, TableCapability.ACCEPT_ANY_SCHEMA);

  private final StructType schema;

  /** {@code schema}: the provider's, Kafka's with or without headers and a typed value. */
  RaylogTable(StructType schema) {
    this.schema = schema;
  }

  @Override
  public String name() {
    return "raylog";
  }

  @Override
  @SuppressWarnings("deprecation") // columns() is derived from it
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return CAPABILITIES;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new RaylogScanBuilder(options, schema);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new StreamingSink.Builder(info);
  }
}
