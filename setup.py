"""The compiled pieces: raylog/kafka/_records.c (Kafka records to columns and back) and
raylog/records/_append.c (the producer's per-record append).

Everything else is in pyproject.toml. The extensions are optional: where one cannot be built,
installing goes on and its module uses its pure-Python twin (records_py.py, append_py.py),
slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("raylog.kafka._records", ["raylog/kafka/_records.c"], extra_compile_args=["-O3"],
              optional=True),
    Extension("raylog.records._append", ["raylog/records/_append.c"],
              extra_compile_args=["-O3"], optional=True),
])
