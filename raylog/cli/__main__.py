"""``python -m raylog.cli ...``: the ``raylog`` command."""

import sys

from raylog.cli.commands import main

sys.exit(main())
