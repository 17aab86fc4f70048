#!/usr/bin/python3
# lingbot-gst: writes tests/vae/data/vae_tiny_weights.pth, a Wan2.1_VAE.pth-
# layout checkpoint (torch.save of a plain name -> fp32 tensor dict, the 194
# keys of vae_and_distributed_spec.md A.7 at width 8) holding exactly the
# weights of tests/data/golden/vae_tiny.safetensors, so that a decode from
# the .pth can be compared with the golden outputs.
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Usage: /usr/bin/python3 tests/vae/make_vae_pth.py [SRC.safetensors] [OUT.pth]
# Needs only torch (no numpy, no safetensors package).
import collections
import json
import os
import struct
import sys

import torch

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    root, "tests", "data", "golden", "vae_tiny.safetensors")
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    root, "tests", "vae", "data", "vae_tiny_weights.pth")

with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()

meta = header.pop("__metadata__")
keys = json.loads(meta["weight_keys"])
assert len(keys) == 194, len(keys)
sd = collections.OrderedDict()
for k in keys:
    e = header[k]
    assert e["dtype"] == "F32", (k, e["dtype"])
    a, b = e["data_offsets"]
    t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32)
    sd[k] = t.reshape(e["shape"]).clone()

os.makedirs(os.path.dirname(out), exist_ok=True)
# default zip serialisation, as torch.save wrote Wan2.1_VAE.pth
torch.save(sd, out)
print("wrote", out, len(sd), "tensors")
