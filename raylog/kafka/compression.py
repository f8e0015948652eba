"""The five codecs of Kafka's record batches, both ways, as Kafka's clients write them.

- gzip: a gzip member (RFC 1952).
- snappy: either raw snappy, or the xerial framing the Java client writes: a 16-byte
  header (byte 0x82, "SNAPPY", a zero byte, version and compatible version as int32), then
  blocks of (int32 length, raw snappy block) of at most 32 KiB uncompressed each. Both are
  read; the xerial framing is written, since the Java client reads only that.
- lz4: the LZ4 frame format with independent blocks and no content size, which the Java
  client's KafkaLZ4BlockInputStream requires (magic 2 batches use the correct header checksum).
- zstd: a zstd frame.

Decompression stops at MAX_DECOMPRESSED_BYTES, whatever a frame claims, so that a few
hostile bytes cannot make the gateway allocate gigabytes; every failure is a
CorruptRecordError (Kafka's CORRUPT_MESSAGE).
"""

from __future__ import annotations

import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard

from raylog.errors import CorruptRecordError
from raylog.kafka.batch import KafkaCodec

# A batch's records, decompressed, may not exceed this: Kafka's default batch limit
# (message.max.bytes, 1 MiB) times a generous ratio.
MAX_DECOMPRESSED_BYTES = 256 << 20

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 << 10
_INT32 = struct.Struct(">i")
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_GZIP_LEVEL = 1  # the gateway compresses on the fetch path: speed over ratio
_ZSTD_LEVEL = 3  # zstd's and Kafka's default
_SLICE = 1 << 20  # decompressed bytes asked for at once where the size is not known
_local = threading.local()


def compress(codec: KafkaCodec, data: bytes | bytearray | memoryview) -> bytes:
    """``data`` compressed with ``codec`` as a Kafka client writes it."""
    if codec == KafkaCodec.NONE:
        return bytes(data)
    if codec == KafkaCodec.GZIP:
        c = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
        return c.compress(data) + c.flush()
    if codec == KafkaCodec.SNAPPY:
        return _xerial_compress(memoryview(data))
    if codec == KafkaCodec.LZ4:
        return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                  block_linked=False, store_size=False,
                                  content_checksum=False, compression_level=0)
    if codec == KafkaCodec.ZSTD:
        return _zstd_contexts()[0].compress(data)
    raise ValueError(f"unknown Kafka codec {codec!r}")


def _xerial_compress(data: memoryview) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def decompress(codec: KafkaCodec, data: bytes | bytearray | memoryview,
               limit: int = MAX_DECOMPRESSED_BYTES) -> bytes | memoryview:
    """``data`` decompressed with ``codec``; CorruptRecordError if it does not decompress
    or would exceed ``limit`` bytes."""
    if codec == KafkaCodec.NONE:
        return data
    try:
        if codec == KafkaCodec.GZIP:
            out = _gunzip(data, limit)
        elif codec == KafkaCodec.SNAPPY:
            out = _snappy_decompress(memoryview(data), limit)
        elif codec == KafkaCodec.LZ4:
            out = _lz4_decompress(data, limit)
        elif codec == KafkaCodec.ZSTD:
            out = _zstd_decompress(data, limit)
        else:
            raise CorruptRecordError(f"unknown Kafka codec {codec}")
    except (zlib.error, cramjam.DecompressionError, RuntimeError, zstandard.ZstdError,
            ValueError, struct.error) as e:
        raise CorruptRecordError(f"Kafka batch records do not decompress as "
                                 f"{codec.name.lower()}: {e}") from e
    if len(out) > limit:
        raise CorruptRecordError(f"Kafka batch records decompress to more than {limit} bytes")
    return out


def _gunzip(data, limit: int) -> bytes:
    d = zlib.decompressobj(_GZIP_WBITS)
    out = d.decompress(data, limit + 1)
    if not d.eof:
        raise CorruptRecordError("gzip records are truncated" if len(out) <= limit
                                 else f"gzip records decompress to more than {limit} bytes")
    return out


def _snappy_block(block: memoryview, limit: int) -> bytes:
    size = cramjam.snappy.decompress_raw_len(block)
    if size > limit:
        raise CorruptRecordError(f"snappy records claim {size} bytes, more than {limit}")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: memoryview, limit: int) -> bytes:
    if data[:len(_XERIAL_MAGIC)] != _XERIAL_MAGIC or len(data) < len(_XERIAL_HEADER):
        return _snappy_block(data, limit)
    parts, pos, total = [], len(_XERIAL_HEADER), 0
    while pos < len(data):
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError("xerial snappy block runs past the records")
        block = _snappy_block(data[pos:pos + size], limit - total)
        total += len(block)
        parts.append(block)
        pos += size
    return b"".join(parts)


def _lz4_decompress(data, limit: int) -> bytes:
    # In slices: asked for up to ``limit`` bytes at once, the decompressor allocates that
    # much (a 16 KiB batch took 6x longer with a 256 MiB limit).
    d = lz4.frame.LZ4FrameDecompressor()
    parts = [d.decompress(data, max_length=_SLICE)]
    total = len(parts[0])
    while not d.eof and not d.needs_input and total <= limit:
        parts.append(d.decompress(b"", max_length=_SLICE))
        total += len(parts[-1])
    if not d.eof and total <= limit:
        raise CorruptRecordError("lz4 records are truncated")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _zstd_contexts() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    """This thread's zstd contexts: making one costs as much as a batch's decompression,
    and one must not be used by two threads at once."""
    contexts = getattr(_local, "zstd", None)
    if contexts is None:
        contexts = _local.zstd = (zstandard.ZstdCompressor(level=_ZSTD_LEVEL),
                                  zstandard.ZstdDecompressor())
    return contexts


def _zstd_decompress(data, limit: int) -> bytes:
    size = zstandard.frame_content_size(data)
    if size > limit:
        raise CorruptRecordError(f"zstd records claim {size} bytes, more than {limit}")
    decompressor = _zstd_contexts()[1]
    if size >= 0:
        return decompressor.decompress(data)
    # A frame without its size (a streaming writer's, as the Java client's): read in slices.
    parts, total = [], 0
    with decompressor.stream_reader(data) as reader:
        while total <= limit and (part := reader.read(_SLICE)):
            parts.append(part)
            total += len(part)
    return b"".join(parts)
