"""The ``raylog`` command line (operators' tool)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("raylog: the command line arrives with the brokers-on-Ray issue", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
