"""Progress displays: plain lines when the stream is not a terminal."""

from __future__ import annotations

import io

from raylog.util.progress import progress


def test_off_a_terminal_progress_is_plain_lines_and_one_at_the_end():
    out = io.StringIO()
    with progress(1000, "producing", "records", stream=out, every_s=0) as shown:
        for _ in range(4):
            shown.update(250)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and "\r" not in out.getvalue()
    assert lines[-1].startswith("producing: 1,000 of 1,000 records in ")
    assert shown.done == 1000


def test_an_unknown_total_is_counted_without_one():
    out = io.StringIO()
    shown = progress(None, "copying", "batches", stream=out, every_s=3600)
    shown.update(7)
    assert out.getvalue() == ""  # not yet: at most one line per every_s
    shown.close()
    shown.close()  # once
    assert out.getvalue().startswith("copying: 7 batches in ") and out.getvalue().count("\n") == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_it_is_a_bar():
    out = _Terminal()
    with progress(100, "producing", "records", stream=out) as shown:
        shown.update(100)
    assert "producing" in out.getvalue() and "100/100" in out.getvalue()
    assert "\r" in out.getvalue()  # redrawn in place
