"""``raylog schemas`` and ``raylog registry`` refuse bad input before connecting to anything."""

from __future__ import annotations

import io

from raylog.cli import main


def run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv, out=io.StringIO())
    except SystemExit as e:  # a usage error: argparse exits
        code = e.code
    return code, capsys.readouterr().err


def test_a_bad_level_or_port_is_a_usage_error(capsys):
    code, err = run(["schemas", "config", "s", "--set", "SIDEWAYS"], capsys)
    assert code == 2 and "invalid compatibility level 'SIDEWAYS'" in err
    code, err = run(["registry", "--port", "70000"], capsys)
    assert code == 2 and "--port" in err


def test_an_unreadable_or_invalid_schema_is_refused_before_connecting(capsys, tmp_path):
    code, err = run(["schemas", "register", "s", str(tmp_path / "missing.avsc")], capsys)
    assert code == 1 and "cannot read" in err and err.count("\n") == 1
    bad = tmp_path / "bad.avsc"
    bad.write_text('{"type": "record", "name": "R", "fields": [{"name": "a"}]}')
    code, err = run(["schemas", "check", "s", str(bad)], capsys)
    assert code == 1 and "needs 'type'" in err
