"""raylog's wall clock, said once.

- **Wall time** (:func:`wall_clock_ms`, milliseconds since the epoch): what records,
  commits and log files carry, and what retention and ``list_offset`` by timestamp compare
  with. It can jump (NTP, an operator): never measure a duration with it.
- **Monotonic time** (``time.monotonic``, seconds): deadlines, timeouts, sessions,
  backoffs. It never goes back, and means nothing across processes.

Classes whose behaviour depends on time take a clock argument defaulting to one of these
(``clock: Callable[[], int] = wall_clock_ms``), so that tests inject their own.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    """Now, in milliseconds since the epoch (a record's timestamp)."""
    return time.time_ns() // 1_000_000
