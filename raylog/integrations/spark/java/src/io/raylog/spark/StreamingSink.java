package io.raylog.spark;

import java.util.ArrayList;
import java.util.List;
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
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code writeStream.format("raylog")}: each micro-batch's tasks write through
 * {@link SinkWriter}. It takes the complete output mode by appending the whole result each
 * batch (truncating a log is not a thing).
 *
 * <p>Without {@code transactional.id} it is at least once, as Spark's Kafka sink (a batch
 * tried again after a failure writes its records again). With it, exactly once for
 * read_committed readers: task {@code p} of micro-batch {@code b} writes in the transaction
 * of {@code <transactional.id>-<query id>-<p>} (the query id is kept in the checkpoint, so a
 * restarted query has the same ids and its tasks fence the old run's producers), which also
 * commits the record "this id wrote batch b"; the driver commits the tasks' transactions
 * when the batch's job succeeded, and aborts them when it failed. A query that dies with a
 * batch partly committed reruns it from its checkpoint over the same offsets: the tasks
 * whose id has the batch's record write nothing, the others write (the rows of a task must
 * be the same in the rerun: a deterministic query, as Spark's exactly once assumes).
 */
final class StreamingSink {
  private static final Logger LOG = LoggerFactory.getLogger(StreamingSink.class);

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
      String ids = settings.transactionalId == null ? null
          : settings.transactionalId + "-" + info.queryId();
      return new Write() {
        @Override
        public String description() {
          return "raylog sink";
        }

        @Override
        public StreamingWrite toStreaming() {
          return new Streaming(settings, ids);
        }
      };
    }
  }

  static final class Streaming implements StreamingWrite {
    private final SinkWriter.Settings settings;
    private final String ids; // the tasks' transactional ids less "-<p>"; null: none

    Streaming(SinkWriter.Settings settings, String ids) {
      this.settings = settings;
      this.ids = ids;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
      return new Factory(settings, ids);
    }

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {
      if (ids == null) {
        return; // at least once: the tasks' records are acknowledged
      }
      List<SinkWriter.Written> prepared = new ArrayList<>();
      for (WriterCommitMessage m : messages) {
        prepared.add((SinkWriter.Written) m);
      }
      settings.commitAll(prepared, idsOf(messages.length), "micro-batch " + epochId
          + " is rerun when the query restarts, and the committed tasks do not write again");
    }

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {
      if (ids == null) {
        return;
      }
      Exception failed = settings.abortAll(idsOf(messages.length));
      if (failed != null) { // the tasks' next attempts fence them, or the timeout aborts them
        LOG.warn("could not abort the transactions of micro-batch {}: {}", epochId,
            failed.toString());
      }
    }

    private List<String> idsOf(int tasks) {
      List<String> out = new ArrayList<>();
      for (int p = 0; p < tasks; p++) {
        out.add(ids + "-" + p);
      }
      return out;
    }
  }

  static final class Factory implements StreamingDataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final SinkWriter.Settings settings;
    private final String ids;

    Factory(SinkWriter.Settings settings, String ids) {
      this.settings = settings;
      this.ids = ids;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
      return ids == null ? new SinkWriter(settings)
          : new SinkWriter(settings, ids + "-" + partitionId, epochId);
    }
  }
}
