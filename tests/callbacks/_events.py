"""An event-file reader written for the tests, as an independent reference (no TensorFlow, no TensorBoard).

An event file is TFRecord-framed (uint64 little-endian length, uint32 masked CRC-32C of those 8 bytes, the record,
uint32 masked CRC-32C of the record), each record a serialized `Event` proto, decoded with tensorboardX's generated
`event_pb2`. The CRC-32C (Castagnoli) is table-driven, below, and every CRC is checked. `tf.summary` (Keras's own
callback) writes scalars as float32 `tensor` payloads under the 'scalars' plugin, tensorboardX as `simple_value`:
the reader takes both.
"""

import collections
import glob
import os
import struct

import numpy as np
from tensorboardX.proto import event_pb2


# -- an independent event-file reader ------------------------------------------------------------------------------


def _crc32c_table():
    """CRC-32C (Castagnoli, RFC 3720), reflected polynomial 0x82F63B78: the table of the byte-wise algorithm."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    """TFRecord's mask: rotate right by 15 bits, add 0xA282EAD8 (mod 2^32)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_records(path):
    """The serialized records of one TFRecord file, each frame's two CRCs checked."""
    with open(path, "rb") as f:
        data = f.read()
    position = 0
    while position < len(data):
        assert len(data) - position >= 12, f"{path}: truncated frame header at byte {position}"
        header = data[position:position + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[position + 8:position + 12])
        assert header_crc == masked_crc32c(header), f"{path}: bad length CRC at byte {position}"
        end = position + 12 + length
        assert len(data) >= end + 4, f"{path}: truncated record at byte {position}"
        record = data[position + 12:end]
        (record_crc,) = struct.unpack("<I", data[end:end + 4])
        assert record_crc == masked_crc32c(record), f"{path}: bad record CRC at byte {position}"
        yield record
        position = end + 4


Scalar = collections.namedtuple("Scalar", "tag step value kind")

_TENSOR_DTYPES = {1: np.float32, 2: np.float64}  # tensorflow.DataType DT_FLOAT, DT_DOUBLE


def _tensor_value(tensor):
    if tensor.float_val:
        return float(tensor.float_val[0])
    if tensor.double_val:
        return float(tensor.double_val[0])
    return float(np.frombuffer(tensor.tensor_content, _TENSOR_DTYPES[tensor.dtype])[0])


def event_files(folder):
    return sorted(glob.glob(os.path.join(str(folder), "events.out.tfevents.*")))


def read_scalars(folder):
    """Every scalar summary of the event files in `folder`, in file (then write) order, as `Scalar`s.

    A `tensor` value counts as a scalar when its tag was marked with the 'scalars' plugin (in that event or an
    earlier one of the file); other summaries (Keras's model graph, histograms) are left out.
    """
    found = []
    for path in event_files(folder):
        scalar_tags = set()
        records = list(event_records(path))
        assert event_pb2.Event.FromString(records[0]).file_version.startswith("brain.Event:")
        for record in records:
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if value.metadata.plugin_data.plugin_name == "scalars":
                    scalar_tags.add(value.tag)
                if kind == "simple_value":
                    found.append(Scalar(value.tag, event.step, float(value.simple_value), kind))
                elif kind == "tensor" and value.tag in scalar_tags:
                    found.append(Scalar(value.tag, event.step, _tensor_value(value.tensor), kind))
    return found


def series(folder):
    """`{tag: [(step, value), ...]}` of `read_scalars(folder)`."""
    out = collections.defaultdict(list)
    for scalar in read_scalars(folder):
        out[scalar.tag].append((scalar.step, scalar.value))
    return dict(out)


def f32(values):
    """Python floats rounded to float32, as a scalar summary stores them."""
    return [float(np.float32(v)) for v in values]


