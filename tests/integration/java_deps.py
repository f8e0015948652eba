"""Jars from Maven Central and small Java programs, for the tests that run real Java Kafka
clients (tests/integration/test_kafka_clients.py, test_kafka_groups.py).

A pom under ``tests/java/<name>/`` names what to fetch; ``mvn dependency:copy-dependencies``
copies its runtime jars into a cache directory named by the pom's hash
(``$XDG_CACHE_HOME/raylog/maven/<name>-<hash>``, as the Spark connector's jar lives in
``~/.cache/raylog/jars``), whole or not at all, so a changed pom fetches anew and the next run
fetches nothing. Java sources are compiled with ``javac`` into a cache directory the same way.
Several test processes may ask at once: one fetch or build per directory, under a file lock.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from raylog.integrations.spark.build import _javac, _locked

JAVA = Path(__file__).resolve().parents[1] / "java"
MVN_TIMEOUT_S = 600


def _cache() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "raylog" / "maven"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _digest(paths: list[Path], *extra: str) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    for text in extra:
        h.update(text.encode())
    return h.hexdigest()[:16]


def _once(target: Path, make) -> Path:
    """``target``, made by ``make(staging directory)`` unless it exists; moved into place
    whole."""
    if target.is_dir():
        return target
    with _locked(target.parent):
        if not target.is_dir():
            with tempfile.TemporaryDirectory(prefix=".staging-", dir=target.parent) as tmp:
                staged = Path(tmp) / "out"
                staged.mkdir()
                make(staged)
                os.replace(staged, target)
    return target


def maven_jars(name: str) -> list[Path]:
    """The runtime jars of ``tests/java/<name>/pom.xml``, fetched once. Skips the test when
    Maven is not installed."""
    pom = JAVA / name / "pom.xml"
    mvn = shutil.which("mvn")
    if mvn is None:
        pytest.skip("Maven (mvn) is not installed: it fetches the Java Kafka client's jars")

    def fetch(out: Path) -> None:
        done = subprocess.run([mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                               f"-DoutputDirectory={out}", "-DincludeScope=runtime"],
                              capture_output=True, text=True, timeout=MVN_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"mvn could not fetch the jars of {pom}:\n"
                               f"{done.stdout[-4000:]}{done.stderr[-4000:]}")

    target = _once(_cache() / f"{name}-{_digest([pom])}", fetch)
    return sorted(target.glob("*.jar"))


def compile_java(name: str, jars: list[Path]) -> Path:
    """The classes of ``tests/java/<name>/src/*.java`` compiled against ``jars``, once per
    version of the sources and jars: the directory to put on the classpath."""
    sources = sorted((JAVA / name / "src").rglob("*.java"))
    javac = _javac()

    def build(out: Path) -> None:
        done = subprocess.run([javac, "--release", "17", "-encoding", "UTF-8", "-d", str(out),
                               "-cp", os.pathsep.join(map(str, jars)), *map(str, sources)],
                              capture_output=True, text=True, timeout=MVN_TIMEOUT_S,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed:\n{done.stdout}{done.stderr}")

    key = _digest(sources, *(j.name for j in jars))
    return _once(_cache() / f"{name}-classes-{key}", build)


def java_command(classes: Path, jars: list[Path], main: str, *args: str) -> list[str]:
    java = str(Path(_javac()).with_name("java"))
    return [java, "-cp", os.pathsep.join([str(classes), *map(str, jars)]), main, *args]


def spark_kafka_jars() -> list[Path]:
    """Spark's Kafka source for the installed Spark (tests/java/spark-kafka/pom.xml) and the
    jars it needs that pyspark does not ship already (kafka-clients, commons-pool2, the
    token provider): a jar of an artifact pyspark has stays pyspark's."""
    import pyspark

    def artifact(jar: Path) -> str:
        return re.sub(r"-\d[^-]*(-\d+)?\.jar$", "", jar.name)

    pom = (JAVA / "spark-kafka" / "pom.xml").read_text()
    if f"<version>{pyspark.__version__}</version>" not in pom:
        raise RuntimeError(f"tests/java/spark-kafka/pom.xml names another Spark than the "
                           f"installed pyspark {pyspark.__version__}: update its version")
    shipped = {artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in maven_jars("spark-kafka") if artifact(j) not in shipped]
