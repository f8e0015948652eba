"""Compile ``_records.c`` (the per-record loops of raylog.kafka.records) next to this module.

``pip install -e .`` does it through setup.py; this is for a checkout used without
installing it (``PYTHONPATH=$PWD``, as in a worktree), where the installed package is another
checkout's::

    PYTHONPATH=$PWD .venv/bin/python -m raylog.kafka.build

It needs only a C compiler and Python's headers, and reads none of the project's packaging
(the setuptools in an old virtual environment may not read pyproject.toml). Without the
extension, raylog.kafka works with its pure-Python twin, slower.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from setuptools import Distribution, Extension
from setuptools.command.build_ext import build_ext

SOURCE = Path(__file__).with_name("_records.c")
MODULE = "raylog.kafka._records"


def build(root: Path | None = None) -> Path:
    """Compile the extension into ``root``/raylog/kafka/ (by default the checkout holding
    this module); return the path of the built file."""
    root = Path(root) if root is not None else SOURCE.parents[2]
    extension = Extension(MODULE, [str(SOURCE)], extra_compile_args=["-O3"])
    with tempfile.TemporaryDirectory(prefix="raylog-kafka-build-") as temp:
        command = build_ext(Distribution({"name": "raylog-kafka-records",
                                          "ext_modules": [extension]}))
        command.build_lib, command.build_temp = str(root), temp
        command.ensure_finalized()
        command.run()
        return Path(command.get_ext_fullpath(MODULE))


if __name__ == "__main__":
    print(build())
