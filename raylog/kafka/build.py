"""Compile raylog's C helpers next to their modules: ``raylog/kafka/_records.c`` (the
per-record loops of raylog.kafka.records) and ``raylog/records/_append.c`` (the producer's
per-record append, raylog.records.append).

``pip install -e .`` does it through setup.py; this is for a checkout used without
installing it (``PYTHONPATH=$PWD``, as in a worktree), where the installed package is another
checkout's::

    PYTHONPATH=$PWD .venv/bin/python -m raylog.kafka.build

It needs only a C compiler and Python's headers, and reads none of the project's packaging
(the setuptools in an old virtual environment may not read pyproject.toml). Without an
extension, its module works with its pure-Python twin, slower.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from setuptools import Distribution, Extension
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parents[2]
# module -> its source, relative to the checkout (setup.py lists the same).
EXTENSIONS = {
    "raylog.kafka._records": "raylog/kafka/_records.c",
    "raylog.records._append": "raylog/records/_append.c",
}
MODULE = "raylog.kafka._records"


def build(root: Path | None = None, module: str = MODULE) -> Path:
    """Compile the extension ``module`` into ``root`` (by default the checkout holding this
    module), next to its source's place; return the path of the built file."""
    root = Path(root) if root is not None else ROOT
    extension = Extension(module, [str(ROOT / EXTENSIONS[module])], extra_compile_args=["-O3"])
    with tempfile.TemporaryDirectory(prefix="raylog-build-") as temp:
        command = build_ext(Distribution({"name": "raylog-helpers",
                                          "ext_modules": [extension]}))
        command.build_lib, command.build_temp = str(root), temp
        command.ensure_finalized()
        command.run()
        return Path(command.get_ext_fullpath(module))


if __name__ == "__main__":
    for name in EXTENSIONS:
        print(build(module=name))
