package io.raylog.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;

/**
 * {@code writeStream.format("raylog")}: each micro-batch's tasks write through
 * {@link SinkWriter}. Like Spark's Kafka sink it is at least once (a batch tried again after
 * a failure writes its records again) and takes the complete output mode by appending the
 * whole result each batch (truncating a log is not a thing).
 */
final class StreamingSink {
  private StreamingSink() {}

  static final class Builder implements WriteBuilder, SupportsTruncate {
    private final LogicalWriteInfo info;

    Builder(LogicalWriteInfo info) {
      this.info = info;
    }

    @Override
    public WriteBuilder truncate() {
      return this;
    }

    @Override
    public Write build() {
      SinkWriter.Settings settings = SinkWriter.Settings.of(info.schema(),
          info.options().asCaseSensitiveMap());
      if (settings.transactionalId != null) {
        throw new IllegalArgumentException("Option 'transactional.id' applies to batch writes "
            + "(df.write) only: the streaming sink does not write in transactions yet");
      }
      return new Write() {
        @Override
        public String description() {
          return "raylog sink";
        }

        @Override
        public StreamingWrite toStreaming() {
          return new Streaming(settings);
        }
      };
    }
  }

  static final class Streaming implements StreamingWrite {
    private final SinkWriter.Settings settings;

    Streaming(SinkWriter.Settings settings) {
      this.settings = settings;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
      return new Factory(settings);
    }

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {}

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {}
  }

  static final class Factory implements StreamingDataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final SinkWriter.Settings settings;

    Factory(SinkWriter.Settings settings) {
      this.settings = settings;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
      return new SinkWriter(settings);
    }
  }
}
