"""The Spark connector's Java unit tests (raylog/integrations/spark/java/test), run with the
Python ones: the connector is built from source with javac (raylog.integrations.spark.build),
then the tests' own runner runs them in a plain JVM (no Spark session, no Ray)."""

from __future__ import annotations

import subprocess
import sys


def test_java_unit_tests_pass():
    done = subprocess.run([sys.executable, "-m", "raylog.integrations.spark.build", "--test"],
                          capture_output=True, text=True, timeout=600, check=False)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert " 0 failed" in report.splitlines()[-1], report
