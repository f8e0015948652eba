"""raylog's log lines: structured fields for the partition they are about."""

from __future__ import annotations


def test_log_lines_about_a_partition_carry_its_topic_and_partition_as_fields():
    import logging

    from actors import _FORMAT, _Fields, at

    handler = logging.Handler()
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler.addFilter(_Fields())
    record = logging.LogRecord("actors.controller", logging.INFO, __file__, 1,
                               "ISR %s -> %s", ([1, 2], [1]), None)
    for key, value in at("orders", 3)["extra"].items():
        setattr(record, key, value)
    handler.filter(record)
    line = handler.format(record)
    assert line.endswith("INFO actors.controller topic=orders partition=3: ISR [1, 2] -> [1]")
    plain = logging.LogRecord("actors.broker", logging.INFO, __file__, 1, "up", (), None)
    handler.filter(plain)
    assert handler.format(plain).endswith("INFO actors.broker: up")
