#!/usr/bin/env python3
"""Write the t5_tiny weights as a torch.save()-style .pth with bfloat16
storages, the layout of Wan's models_t5_umt5-xxl-enc-bf16.pth (an
OrderedDict of the published key names), without needing torch.

usage: make-t5-pth.py t5_tiny.safetensors out.pth

The pickle is what torch.save (zip format, pickle protocol 2) emits:
collections.OrderedDict of torch._utils._rebuild_tensor_v2(storage, offset,
size, stride, requires_grad=False, OrderedDict()) with persistent ids
('storage', torch.BFloat16Storage, key, 'cpu', numel); the zip holds
archive/data.pkl, archive/data/<key>, archive/version.  Floats are rounded
to bfloat16 to nearest even, as torch's .to(torch.bfloat16) does.
Run at build time (tests/text/meson.build); the output is not committed.
"""
import collections
import io
import json
import pickle
import struct
import sys
import types
import zipfile

torch_mod = types.ModuleType("torch")
utils_mod = types.ModuleType("torch._utils")
torch_mod._utils = utils_mod


class BFloat16Storage:
    pass


BFloat16Storage.__module__ = "torch"
torch_mod.BFloat16Storage = BFloat16Storage


def _rebuild_tensor_v2(*args):
    raise RuntimeError("never called")


_rebuild_tensor_v2.__module__ = "torch._utils"
utils_mod._rebuild_tensor_v2 = _rebuild_tensor_v2
sys.modules["torch"] = torch_mod
sys.modules["torch._utils"] = utils_mod


class Storage:
    def __init__(self, key, numel):
        self.key = key
        self.numel = numel


class Tensor:
    def __init__(self, storage, shape):
        self.storage = storage
        self.shape = tuple(shape)
        stride, s = [], 1
        for d in reversed(self.shape):
            stride.insert(0, s)
            s *= d
        self.stride = tuple(stride)

    def __reduce__(self):
        return (_rebuild_tensor_v2, (self.storage, 0, self.shape, self.stride,
                                     False, collections.OrderedDict()))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", BFloat16Storage, obj.key, "cpu", obj.numel)
        return None


def bf16_bytes(raw):
    n = len(raw) // 4
    out = bytearray(2 * n)
    for i, (u,) in enumerate(struct.iter_unpack("<I", raw)):
        if (u & 0x7FFFFFFF) > 0x7F800000:
            b = (u >> 16) | 0x40
        else:
            b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
        struct.pack_into("<H", out, 2 * i, b)
    return bytes(out)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    sd = collections.OrderedDict()
    blobs = []
    for name, info in header.items():
        if name == "__metadata__" or "." not in name:
            continue
        if name.split(".")[0] in ("input", "output", "trace"):
            continue
        assert info["dtype"] == "F32", name
        a, b = info["data_offsets"]
        key = str(len(blobs))
        numel = (b - a) // 4
        blobs.append((key, bf16_bytes(data[a:b])))
        sd[name] = Tensor(Storage(key, numel), info["shape"])
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(sd)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        for key, blob in blobs:
            z.writestr("archive/data/" + key, blob)
        z.writestr("archive/version", "3\n")


if __name__ == "__main__":
    main()
