"""The one compiled piece: raylog/kafka/_records.c (Kafka records to columns and back).

Everything else is in pyproject.toml. The extension is optional: where it cannot be built,
installing goes on and raylog.kafka uses its pure-Python twin (records_py.py), slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("raylog.kafka._records", ["raylog/kafka/_records.c"],
                             extra_compile_args=["-O3"], optional=True)])
