"""Writes the safetensors files that tests/unit/safetensors_test.c compares its writer against,
byte for byte, with the python safetensors library (the Rust writer underneath).

    python3 tests/unit/testdata/gen_safetensors_ref.py tests/unit/testdata

Tensor i (in the order of TENSORS) holds bytes (31*i + 7*k + 3) mod 256 for k = 0..nbytes-1
(BOOL: k mod 2); the C test builds the same bytes. Regenerate only on purpose.
"""
import sys

import safetensors
import torch
from safetensors.torch import save_file

# name, torch dtype, shape: several dtypes, names that sort differently by case and bytes,
# JSON escapes, a non-ASCII name, a scalar, an empty tensor, odd byte counts.
TENSORS = [
    ("b.weight", torch.float32, [2, 3]),
    ("a.bias", torch.float32, [3]),
    ("Upper", torch.float32, [1]),
    ("z", torch.bfloat16, [5]),
    ("emb", torch.float16, [2, 2]),
    ("ids", torch.int64, [4]),
    ("mask", torch.bool, [3]),
    ("scalar", torch.float64, []),
    ("empty", torch.uint8, [0, 4]),
    ("u8", torch.uint8, [7]),
    ("q", torch.int32, [2]),
    ("f8", torch.float8_e4m3fn, [3]),
    ("g8", torch.float8_e5m2, [2]),
    ("s16", torch.int16, [3]),
    ("u16", torch.uint16, [1]),
    ('quote"back\\slash\tnl\n', torch.float32, [1]),
    ("\u00fcn\u00ef", torch.int8, [2]),
]


def build(subset):
    out = {}
    for i, (name, dt, shape) in enumerate(TENSORS):
        if i not in subset:
            continue
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * torch.empty(0, dtype=dt).element_size()
        if dt == torch.bool:
            raw = bytes(k % 2 for k in range(nbytes))
        else:
            raw = bytes((31 * i + 7 * k + 3) % 256 for k in range(nbytes))
        t = torch.frombuffer(bytearray(raw), dtype=dt) if nbytes else torch.empty(0, dtype=dt)
        out[name] = t.reshape(shape).clone()
    return out


def main():
    d = sys.argv[1]
    save_file(build(range(len(TENSORS))), f"{d}/st_ref_all.safetensors", metadata={"format": "pt"})
    save_file(build([0, 3, 9]), f"{d}/st_ref_nometa.safetensors")
    save_file({}, f"{d}/st_ref_empty.safetensors")
    print("safetensors", safetensors.__version__, "torch", torch.__version__)


if __name__ == "__main__":
    main()
