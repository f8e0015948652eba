package io.raylog.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Makes an executor's readers: columnar ones for offset ranges, a row one for a count. */
final class ReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final String[] columns;
  private final boolean failOnDataLoss;
  private final long fetchTimeoutMs;
  private final String isolation;
  private final AvroValues avro; // null: values (if read) stay bytes

  ReaderFactory(String[] columns, RaylogOptions options, AvroValues avro) {
    this.columns = columns;
    this.failOnDataLoss = options.failOnDataLoss;
    this.fetchTimeoutMs = options.fetchTimeoutMs;
    this.isolation = options.isolation;
    this.avro = avro;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return partition instanceof RangePartition;
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new RangeReader(((RangePartition) partition).ranges, columns, failOnDataLoss,
        fetchTimeoutMs, isolation, avro);
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    if (partition instanceof CountPartition) {
      return new CountPartition.Reader((CountPartition) partition);
    }
    throw new UnsupportedOperationException("raylog reads offset ranges as columnar batches");
  }
}
