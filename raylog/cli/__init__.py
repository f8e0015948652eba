"""raylog's command line: ``raylog`` (the console script) and ``python -m raylog.cli``.

One module per group of commands: ``commands`` (the parser, topics, groups, cluster, start,
bench, demo), ``records`` (produce, consume), ``schemas`` (schemas, registry), ``mirror``
(mirror, flight-serve), ``transactions`` (list, describe, abort), ``balance`` (cluster
balance); ``signals`` stops the commands that run until told, and ``demo`` is ``raylog
demo``. Imports nothing heavy until a command runs: ``raylog --help`` stays fast.
"""

from raylog.cli.commands import main

__all__ = ["main"]
