package io.raylog.spark;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A column of a stored batch as Spark sees it: row i is row {@code shift + i} of the batch
 * (a range starts inside a batch), and with {@code emptyIsNull} an empty list reads as null
 * (Spark's Kafka source shows a record without headers so). No data is copied.
 */
final class ShiftedVector extends ColumnVector {
  private final ColumnVector rows;
  private final int shift;
  private final boolean emptyIsNull;

  ShiftedVector(ColumnVector rows, int shift, boolean emptyIsNull) {
    super(rows.dataType());
    this.rows = rows;
    this.shift = shift;
    this.emptyIsNull = emptyIsNull;
  }

  @Override
  public void close() {
    rows.close();
  }

  @Override
  public boolean hasNull() {
    return emptyIsNull || rows.hasNull();
  }

  @Override
  public int numNulls() {
    throw new UnsupportedOperationException("a slice of a column does not count its nulls");
  }

  @Override
  public boolean isNullAt(int rowId) {
    return rows.isNullAt(rowId + shift)
        || emptyIsNull && rows.getArray(rowId + shift).numElements() == 0;
  }

  @Override
  public boolean getBoolean(int rowId) {
    return rows.getBoolean(rowId + shift);
  }

  @Override
  public byte getByte(int rowId) {
    return rows.getByte(rowId + shift);
  }

  @Override
  public short getShort(int rowId) {
    return rows.getShort(rowId + shift);
  }

  @Override
  public int getInt(int rowId) {
    return rows.getInt(rowId + shift);
  }

  @Override
  public long getLong(int rowId) {
    return rows.getLong(rowId + shift);
  }

  @Override
  public float getFloat(int rowId) {
    return rows.getFloat(rowId + shift);
  }

  @Override
  public double getDouble(int rowId) {
    return rows.getDouble(rowId + shift);
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    return rows.getArray(rowId + shift);
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    return rows.getMap(rowId + shift);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    return rows.getDecimal(rowId + shift, precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    return rows.getUTF8String(rowId + shift);
  }

  @Override
  public byte[] getBinary(int rowId) {
    return rows.getBinary(rowId + shift);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw new UnsupportedOperationException("the columns of a stored batch have no children");
  }
}
