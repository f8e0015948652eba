"""The five Kafka codecs: round trips, what Kafka's clients write, and bad input."""

from __future__ import annotations

import gzip
import os

import cramjam
import lz4.frame
import pytest
import zstandard
from kafka import codec as kafka_codec

from raylog.errors import CorruptRecordError
from raylog.kafka.batch import KafkaCodec
from raylog.kafka.compression import compress, decompress

CODECS = pytest.mark.parametrize("codec", list(KafkaCodec), ids=lambda c: c.name)
DATA = b"".join(b'{"page":"/p/%05d","user":%d}' % (i % 977, i * 7919) for i in range(5000))


@CODECS
@pytest.mark.parametrize("data", [b"", b"x", os.urandom(100_000), DATA],
                         ids=["empty", "one", "random", "text"])
def test_round_trip(codec, data):
    assert bytes(decompress(codec, compress(codec, data))) == data


def test_snappy_is_written_xerial_framed_in_32_kib_blocks():
    out = compress(KafkaCodec.SNAPPY, DATA)
    assert out[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2
    # kafka-python's reader (as the Java client's) takes the framing
    assert kafka_codec.snappy_decode(out) == DATA
    assert len(DATA) > 2 * 32 * 1024  # so several blocks were written


def test_snappy_reads_raw_and_xerial_as_clients_write_them():
    assert decompress(KafkaCodec.SNAPPY, bytes(cramjam.snappy.compress_raw(DATA))) == DATA
    xerial = kafka_codec.snappy_encode(DATA, xerial_compatible=True, xerial_blocksize=4096)
    assert decompress(KafkaCodec.SNAPPY, xerial) == DATA


def test_each_codec_reads_what_kafka_python_writes():
    assert decompress(KafkaCodec.GZIP, kafka_codec.gzip_encode(DATA)) == DATA
    assert decompress(KafkaCodec.LZ4, kafka_codec.lz4_encode(DATA)) == DATA
    assert decompress(KafkaCodec.ZSTD, kafka_codec.zstd_encode(DATA)) == DATA
    # a zstd frame without its content size, as a streaming (Java) writer makes it
    streamed = zstandard.ZstdCompressor().compressobj()
    frame = streamed.compress(DATA) + streamed.flush()
    assert zstandard.frame_content_size(frame) == -1
    assert decompress(KafkaCodec.ZSTD, frame) == DATA


def test_kafka_python_reads_what_each_codec_writes():
    assert kafka_codec.gzip_decode(compress(KafkaCodec.GZIP, DATA)) == DATA
    assert kafka_codec.lz4_decode(compress(KafkaCodec.LZ4, DATA)) == DATA
    assert kafka_codec.zstd_decode(compress(KafkaCodec.ZSTD, DATA)) == DATA


def test_lz4_frame_as_the_java_client_reads_it():
    info = lz4.frame.get_frame_info(compress(KafkaCodec.LZ4, DATA))
    assert info["block_linked"] is False and info["content_size"] == 0
    assert info["block_size_id"] == lz4.frame.BLOCKSIZE_MAX64KB


@pytest.mark.parametrize("codec", [c for c in KafkaCodec if c != KafkaCodec.NONE],
                         ids=lambda c: c.name)
def test_garbage_and_truncation_are_corrupt(codec):
    good = compress(codec, DATA)
    for bad in (b"\x00garbage" * 5, good[: len(good) // 2], good[:3]):
        with pytest.raises(CorruptRecordError):
            decompress(codec, bad)


@pytest.mark.parametrize("codec", [c for c in KafkaCodec if c != KafkaCodec.NONE],
                         ids=lambda c: c.name)
def test_a_bomb_stops_at_the_limit(codec):
    bomb = compress(codec, bytes(1 << 20))
    assert len(bomb) < 64 << 10
    assert len(decompress(codec, bomb, limit=1 << 20)) == 1 << 20
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(codec, bomb, limit=(1 << 20) - 1)


def test_a_zstd_bomb_without_its_size_stops_at_the_limit():
    streamed = zstandard.ZstdCompressor().compressobj()
    bomb = streamed.compress(bytes(3 << 20)) + streamed.flush()
    assert zstandard.frame_content_size(bomb) == -1
    assert len(decompress(KafkaCodec.ZSTD, bomb, limit=3 << 20)) == 3 << 20
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(KafkaCodec.ZSTD, bomb, limit=(2 << 20) + 5)


def test_gzip_members_from_the_standard_library():
    assert decompress(KafkaCodec.GZIP, gzip.compress(DATA, mtime=0)) == DATA
