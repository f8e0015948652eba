"""What the command-line unit tests share."""

from __future__ import annotations

import io

from raylog.cli import main


def run(argv: list[str]) -> tuple[int, str]:
    """``raylog ARGV`` in this process: (exit status, what it printed); a usage error's
    status too (argparse exits)."""
    out = io.StringIO()
    try:
        code = main(argv, out=out)
    except SystemExit as e:
        code = e.code
    return code, out.getvalue()
