package io.raylog.spark;

import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.CreatableRelationProvider;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.collection.JavaConverters;

/**
 * {@code format("raylog")}: raylog topics as a Spark data source with the options and schema
 * of Spark's Kafka source. Reads and streaming writes go through {@link RaylogTable}
 * (DataSource V2); a batch {@code df.write} comes here as a V1 {@link CreatableRelationProvider}
 * (the table has no V2 batch write, so Spark falls back to this for every save mode), which
 * accepts Append and ErrorIfExists and refuses Overwrite and Ignore, as Kafka's does.
 */
public final class RaylogSourceProvider
    implements TableProvider, DataSourceRegister, CreatableRelationProvider {

  @Override
  public String shortName() {
    return "raylog";
  }

  /** Kafka's schema; with {@code valueFormat} {@code avro}, {@code value} is of the reader
   * schema's type (fetched from the registry now, see {@link AvroValues}). */
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return AvroValues.sourceSchema(options);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> options) {
    return new RaylogTable(schema);
  }

  /** Writes {@code data} with the sink's {@code options}; returns how many records were
   * written (raylog.integrations.spark.write calls this). */
  public static long save(Dataset<Row> data, Map<String, String> options) {
    return SinkWriter.Settings.of(data.schema(), options).writeAll(data);
  }

  @Override
  public BaseRelation createRelation(SQLContext sqlContext, SaveMode mode,
      scala.collection.immutable.Map<String, String> parameters, Dataset<Row> data) {
    if (mode == SaveMode.Overwrite || mode == SaveMode.Ignore) {
      throw new IllegalArgumentException("Save mode " + mode + " not allowed for raylog. "
          + "Allowed save modes are Append and ErrorIfExists (default).");
    }
    save(data, JavaConverters.mapAsJavaMap(parameters));
    return new BaseRelation() {
      @Override
      public SQLContext sqlContext() {
        return sqlContext;
      }

      @Override
      public StructType schema() {
        return data.schema();
      }
    };
  }
}
