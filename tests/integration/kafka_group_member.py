"""A Kafka group member in a process of its own (confluent-kafka, no Ray), for tests that
kill it: ``python -m tests.integration.kafka_group_member BOOTSTRAP GROUP TOPIC``. It
subscribes and polls until killed, writing a JSON line with its sorted assignment
(``[[topic, partition], ...]``) each time it changes."""

from __future__ import annotations

import json
import sys

from confluent_kafka import Consumer


def main(bootstrap: str, group: str, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "partition.assignment.strategy": "range",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    last = None
    while True:
        consumer.poll(0.2)
        owned = sorted([tp.topic, tp.partition] for tp in consumer.assignment())
        if owned != last:
            print(json.dumps(owned), flush=True)
            last = owned


if __name__ == "__main__":
    main(*sys.argv[1:4])
