"""Build the Spark connector (``format("raylog")``) from its Java sources.

The connector is Java because Spark's DataSource V2 interfaces are, and because its readers
then hand Spark columnar batches over Arrow vectors with no Python on the way. It is
compiled here, with ``javac`` (JDK 17), against the jars that the installed pip packages ship
(pyspark, ray, raydp): nothing is downloaded. The jar is named by a hash of its sources and
of the jars it was compiled against, so a changed source or upgraded package builds a new
one; it lives in ``raylog/integrations/spark/jars/`` (next to this module) or, where that
is not writable, in ``~/.cache/raylog/jars``. ``python -m raylog.integrations.spark.build``
builds it (the README's commands do, at install time); :func:`connector_jar` builds it on
first use otherwise.

``python -m raylog.integrations.spark.build --test`` also compiles and runs the Java unit tests
(``raylog/integrations/spark/java/test``), which need no Spark session and no Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from raylog.errors import RaylogError

JAVA_ROOT = Path(__file__).parent / "java"
SOURCES = JAVA_ROOT / "src"
TESTS = JAVA_ROOT / "test"
SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
PROVIDER = "io.raylog.spark.RaylogSourceProvider"
TEST_RUNNER = "io.raylog.spark.TestRunner"
# Arrow's memory needs these on Java 17, as in Spark's JVMs
# (raylog.integrations.spark.JAVA17_OPTIONS).
JAVA_TEST_OPTIONS = ["--add-opens=java.base/java.nio=ALL-UNNAMED",
                     "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED"]


class ConnectorBuildError(RaylogError):
    """The Spark connector could not be built (no JDK 17, or the sources do not compile)."""


def classpath() -> list[Path]:
    """The jars the connector compiles and runs against, from the installed packages."""
    import pyspark
    import ray
    import raydp

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    jars.append(Path(ray.__file__).parent / "jars" / "ray_dist.jar")
    jars += sorted((Path(raydp.__file__).parent / "jars").glob("*.jar"))
    missing = [str(j) for j in jars if not j.is_file()]
    if missing or len(jars) < 3:
        raise ConnectorBuildError(f"the jars of pyspark, ray and raydp are not all installed: "
                                  f"missing {missing or 'pyspark/jars'}")
    return jars


def _sources(root: Path) -> list[Path]:
    return sorted(root.rglob("*.java"))


def _digest(paths: list[Path], jars: list[Path]) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(str(path.relative_to(JAVA_ROOT)).encode())
        h.update(path.read_bytes())
    for jar in jars:  # the packages' versions, not their bytes: cheap to check every time
        h.update(jar.name.encode())
    return h.hexdigest()[:16]


def _jar_dirs() -> Iterator[Path]:
    yield Path(__file__).parent / "jars"
    yield Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "raylog" / "jars"


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    javac = str(Path(home) / "bin" / "javac") if home else shutil.which("javac")
    if not javac or not Path(javac).exists():
        raise ConnectorBuildError("javac (JDK 17) is needed to build raylog's Spark connector; "
                                  "install a JDK 17 or set JAVA_HOME")
    return javac


def _compile(sources: list[Path], jars: list[Path], out: Path) -> None:
    command = [_javac(), "--release", "17", "-nowarn", "-encoding", "UTF-8", "-d", str(out),
               "-cp", os.pathsep.join(str(j) for j in jars), *map(str, sources)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConnectorBuildError(f"javac failed:\n{done.stdout}{done.stderr}")


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One build at a time per directory (several processes may start Spark at once)."""
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def connector_jar() -> Path:
    """The connector's jar, built now unless this version of it was built before."""
    jars = classpath()
    sources = _sources(SOURCES)
    if not sources:
        raise ConnectorBuildError(f"no Java sources under {SOURCES}: raylog is installed "
                                  f"without its package data")
    name = f"raylog-spark-{_digest(sources, jars)}.jar"
    for directory in _jar_dirs():
        if (directory / name).is_file():
            return directory / name
    for directory in _jar_dirs():
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with _locked(directory):
                if not (directory / name).is_file():
                    _build(sources, jars, directory, name)
            return directory / name
        except PermissionError:
            continue
    raise ConnectorBuildError(f"no writable place for the connector's jar in {list(_jar_dirs())}")


def _build(sources: list[Path], jars: list[Path], directory: Path, name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="raylog-javac-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        _compile(sources, jars, classes)
        staged = Path(tmp) / name
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n"
                         "Created-By: raylog.integrations.spark.build\n")
            jar.writestr(SERVICE, PROVIDER + "\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, str(path.relative_to(classes)))
        os.replace(staged, directory / name)  # whole or not at all
    for old in directory.glob("raylog-spark-*.jar"):
        if old.name != name:
            old.unlink(missing_ok=True)


def run_java_tests() -> int:
    """Compiles the Java unit tests against the connector and runs them; returns the exit
    status (0: all passed), having printed each test's outcome."""
    jar = connector_jar()
    jars = [jar, *classpath()]
    with tempfile.TemporaryDirectory(prefix="raylog-javatest-") as tmp:
        classes, fixtures = Path(tmp) / "classes", Path(tmp) / "fixtures"
        classes.mkdir()
        write_batch_fixtures(fixtures)
        write_avro_fixtures(fixtures)
        _compile(_sources(TESTS), jars, classes)
        java = str(Path(_javac()).with_name("java"))
        command = [java, *JAVA_TEST_OPTIONS, f"-Draylog.test.fixtures={fixtures}", "-cp",
                   os.pathsep.join([str(classes), *map(str, jars)]), TEST_RUNNER]
        return subprocess.run(command, check=False).returncode


def write_batch_fixtures(directory: Path) -> None:
    """Stored batches written by raylog's own encoder, for the Java decoder's tests, with
    what the Python read path (``read_table`` then ``spark_table``, which the connector's
    other path ships) makes of them: the Java decoder must give the same rows.

    ``chunk.bin`` holds an LZ4 batch of offsets 100-104 and an uncompressed compacted batch
    (explicit offsets 105, 107, 110, last offset 111); ``corrupt.bin`` the first with a
    payload byte flipped; ``expected.json`` the rows of every [start, end) asked for.
    """
    import json

    import numpy as np
    import pyarrow as pa

    from raylog.records.header import Codec, stamp
    from raylog.records.kafka_columns import SPARK_COLUMNS, spark_table
    from raylog.records.payload import EXPLICIT_SCHEMA, HEADERS_TYPE, PAYLOAD_SCHEMA, encode
    from raylog.records.reader import read_table

    directory.mkdir(parents=True)
    headers = pa.array([[("a", b"1")], [], None, [("b", None), ("c", b"")], []], HEADERS_TYPE)
    dense = pa.table({"timestamp": pa.array(np.arange(5, dtype=np.int64) + 1_700_000_000_000),
                      "key": pa.array([b"k0", None, b"k2", b"", b"k4"]),
                      "value": pa.array([b"v0", b"v1", None, b"v3" * 100, b"v4"]),
                      "headers": headers}, schema=PAYLOAD_SCHEMA)
    compacted = pa.table({"timestamp": pa.array([7, 8, 9], pa.int64()),
                          "key": pa.array([b"x", b"y", b"z"]),
                          "value": pa.array([b"1", None, b"3"]),
                          "headers": pa.array([[], [("h", b"v")], []], HEADERS_TYPE),
                          "offset_delta": pa.array([0, 2, 5], pa.int32())},
                         schema=EXPLICIT_SCHEMA)
    first = bytearray(encode(dense, codec=Codec.LZ4))
    stamp(first, 100, 3)
    second = bytearray(encode(compacted, codec=Codec.NONE, last_offset_delta=6))
    stamp(second, 105, 3)
    chunk = bytes(first + second)
    (directory / "chunk.bin").write_bytes(chunk)
    corrupt = bytearray(first)
    corrupt[-3] ^= 0xFF
    (directory / "corrupt.bin").write_bytes(bytes(corrupt))

    def cell(value: object) -> object:
        if isinstance(value, bytes):
            return value.hex()
        if isinstance(value, list):
            return [[h["key"], cell(h["value"])] for h in value]
        if hasattr(value, "timestamp"):  # a datetime: microseconds, as Spark holds it
            return round(value.timestamp() * 1_000_000)
        return value

    expected = {}
    for start, end in [(100, 112), (101, 104), (103, 108), (106, 111), (110, 112)]:
        table = spark_table(read_table(chunk, start, end), "t", 4, SPARK_COLUMNS)
        expected[f"{start}-{end}"] = [{k: cell(v) for k, v in row.items()}
                                      for row in table.to_pylist()]
    (directory / "expected.json").write_text(json.dumps(expected, indent=1))


_AVRO_WRITER = {"type": "record", "name": "Reading", "namespace": "fixture", "fields": [
    {"name": "id", "type": "int"},
    {"name": "dropped", "type": "string"},
    {"name": "name", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "tags", "type": {"type": "array", "items": "int"}},
    {"name": "scores", "type": {"type": "map", "values": "double"}},
    {"name": "place", "type": {"type": "record", "name": "Place", "fields": [
        {"name": "x", "type": "float"}, {"name": "y", "type": "float"}]}},
    {"name": "raw", "type": "bytes"},
    {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                               "scale": 2}}]}
# The reader: id promoted to long, 'dropped' gone, 'country' added with a default, an enum
# symbol gone with a default for it, fields in another order.
_AVRO_READER = {**_AVRO_WRITER, "fields": [
    {"name": "country", "type": "string", "default": "NL"},
    *[f for f in _AVRO_WRITER["fields"][2:] if f["name"] != "kind"],
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"],
                              "default": "A"}},
    {"name": "id", "type": "long"}]}


def write_avro_fixtures(directory: Path) -> None:
    """``avro.json``: values in Confluent's wire format written by raylog's serializers'
    fastavro, their writer and reader schemas, and the rows fastavro's own resolution reads
    (bytes as hex, dates as days, timestamps as microseconds, decimals as text): the Java
    decoder of ``valueFormat`` ``avro`` must read the same."""
    import datetime
    import decimal
    import io
    import json

    import fastavro

    from raylog.schemas.serde import frame

    rows = [
        {"id": 1, "dropped": "x", "name": "ann", "note": None, "kind": "C", "tags": [],
         "scores": {}, "place": {"x": 1.5, "y": -2.0}, "raw": b"", "hash": b"\x00\x01\x02\x03",
         "day": datetime.date(2024, 2, 29), "price": decimal.Decimal("-0.05"),
         "at": datetime.datetime(2024, 1, 1, 12, 0, 0, 123000, tzinfo=datetime.UTC)},
        {"id": -7, "dropped": "", "name": "bö", "note": "n", "kind": "B", "tags": [3, 1, 2],
         "scores": {"a": 0.25, "b": 1e-3}, "place": {"x": 0.0, "y": 3.25}, "raw": b"\xff\x00",
         "hash": b"abcd", "day": datetime.date(1969, 12, 31),
         "price": decimal.Decimal("1234567.89"),
         "at": datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)},
    ]
    writer = fastavro.parse_schema(_AVRO_WRITER)
    reader = fastavro.parse_schema(_AVRO_READER)
    values, expected = [], []
    for row in [*rows, None]:
        if row is None:  # a tombstone
            values.append(None)
            expected.append(None)
            continue
        out = io.BytesIO()
        fastavro.schemaless_writer(out, writer, row)
        values.append(frame(7, out.getvalue()).hex())
        read = fastavro.schemaless_reader(io.BytesIO(out.getvalue()), writer, reader)
        # fastavro gives the writer's order; Spark's struct has the reader's.
        expected.append({f["name"]: _as_json(read[f["name"]]) for f in _AVRO_READER["fields"]})
    (directory / "avro.json").write_text(json.dumps(
        {"id": 7, "writer": _AVRO_WRITER, "reader": _AVRO_READER, "values": values,
         "expected": expected}, indent=1))


def _as_json(value: object) -> object:
    import datetime
    import decimal

    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime.datetime):
        return (value - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) \
            // datetime.timedelta(microseconds=1)
    if isinstance(value, datetime.date):
        return (value - datetime.date(1970, 1, 1)).days
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raylog.integrations.spark.build",
                                     description="Build raylog's Spark connector jar.")
    parser.add_argument("--test", action="store_true", help="also run the Java unit tests")
    args = parser.parse_args(argv)
    try:
        print(connector_jar())
        return run_java_tests() if args.test else 0
    except ConnectorBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
