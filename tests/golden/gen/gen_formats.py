#!/usr/bin/env python3
"""Golden fixtures of the low-precision formats, dumped from the real libraries.

  python3 tests/golden/gen/gen_formats.py [--device cpu|cuda] [--out DIR]

Writes DIR/formats_<device>.safetensors (default DIR tests/golden/data/formats) holding:
  x F32 [N]: the sample; bf16.y BF16 [N]: torch x.to(bfloat16)
  fp8.e4m3 U8 [N], fp8.e5m2 U8 [N]   torch x.to(float8_e4m3fn / float8_e5m2) bytes
  fp8.decode_e4m3 / fp8.decode_e5m2 F32 [256]       torch float of every code
  map.signed / map.unsigned F32 [256]               bitsandbytes create_dynamic_map
  q8.x F32, q8.q U8, q8.absmax F32                  quantize_blockwise(x, signed map, blocksize 256)
  nf4a.*: a bnb-4bit weight as Linear4bit saves it (prefix "nf4a.weight"): bf16 W [64, 200],
          blocksize 64, double quantization; plus nf4a.W (BF16) and nf4a.deq (BF16, dequantize_4bit)
  nf4b.*: fp32 W [7, 37] (odd n = 259), blocksize 128, no double quantization, deq F32
  nf4c.absmax / nf4c.offset: the first-level absmax and mean before the nested step of nf4a
  adam.*: AdamW8bit (defaults) on a param of 4200 (8-bit, a short last block) and one of 500 (fp32):
          p0, g1..g3 and after each step t: p{t}, q1_{t}, q2_{t}, absmax1_{t}, absmax2_{t} (8-bit),
          and sp{t}, sm{t}, sv{t} (32-bit)
Seeded (torch.manual_seed(SEED)); the versions go into the metadata and MANIFEST.
"""
import argparse
import hashlib
import os

import bitsandbytes as bnb
import bitsandbytes.functional as F
import torch
from safetensors.torch import save_file

SEED = 20261123


def sample_floats(n, g):
    """A mix: normals at several scales, uniform random bit patterns with exponents around the
    FP8/BF16 ranges, and specials."""
    parts = []
    for s in (1e-6, 1e-3, 0.05, 1.0, 30.0, 400.0, 5e4, 1e6):
        parts.append(torch.randn(n // 16, generator=g) * s)
    bits = torch.randint(0, 2**31 - 1, (n // 4,), generator=g, dtype=torch.int64)
    exps = torch.randint(127 - 26, 127 + 20, (n // 4,), generator=g, dtype=torch.int64)
    bits = (bits & 0x807FFFFF) | (exps << 23)
    parts.append(bits.to(torch.int32).view(torch.float32))
    bits2 = torch.randint(-(2**31), 2**31 - 1, (n // 8,), generator=g, dtype=torch.int64).to(torch.int32)
    parts.append(bits2.view(torch.float32))
    x = torch.cat(parts)
    spec = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, 464.0, 464.00003, 480.0,
                         57344.0, 61439.996, 61440.0, 2**-10, 2**-17, 2**-9 * 1.5, 3.4e38, 1e-45])
    return torch.cat([x, spec, -spec]).contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="tests/golden/data/formats")
    a = ap.parse_args()
    dev = a.device
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    t = {}

    x = sample_floats(12288, g)
    t["x"] = x
    t["bf16.y"] = x.to(dev).to(torch.bfloat16).cpu()
    t["fp8.e4m3"] = x.to(dev).to(torch.float8_e4m3fn).cpu().view(torch.uint8)
    t["fp8.e5m2"] = x.to(dev).to(torch.float8_e5m2).cpu().view(torch.uint8)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    t["fp8.decode_e4m3"] = codes.view(torch.float8_e4m3fn).to(dev).float().cpu()
    t["fp8.decode_e5m2"] = codes.view(torch.float8_e5m2).to(dev).float().cpu()

    t["map.signed"] = F.create_dynamic_map(signed=True)
    t["map.unsigned"] = F.create_dynamic_map(signed=False)

    xq = torch.randn(256 * 12 + 77, generator=g) * 0.3
    q, st = F.quantize_blockwise(xq.to(dev), blocksize=256)
    t["q8.x"] = xq
    t["q8.q"] = q.cpu()
    t["q8.absmax"] = st.absmax.cpu()

    # nf4a: bf16 weight, blocksize 64, double quant, saved the way Linear4bit saves (as_dict(packed=True)).
    W = (torch.randn(64, 200, generator=g) * 0.02).to(torch.bfloat16)
    first_packed, first_absmax = torch.ops.bitsandbytes.quantize_4bit(W.to(dev), 64, "nf4", torch.uint8)
    t["nf4c.absmax"] = first_absmax.cpu()
    t["nf4c.offset"] = first_absmax.mean().reshape(1).cpu()
    packed, qs = F.quantize_4bit(W.to(dev), blocksize=64, compress_statistics=True, quant_type="nf4")
    t["nf4a.W"] = W
    t["nf4a.weight"] = packed.cpu()
    for k, v in qs.as_dict(packed=True).items():
        t["nf4a.weight." + k] = v.cpu()
    t["nf4a.deq"] = F.dequantize_4bit(packed, qs).cpu()
    # nf4b: fp32, odd n, blocksize 128, no double quant.
    Wb = torch.randn(7, 37, generator=g)
    packed_b, qsb = F.quantize_4bit(Wb.to(dev), blocksize=128, compress_statistics=False, quant_type="nf4")
    t["nf4b.W"] = Wb.clone()
    t["nf4b.weight"] = packed_b.cpu()
    for k, v in qsb.as_dict(packed=True).items():
        t["nf4b.weight." + k] = v.cpu()
    t["nf4b.deq"] = F.dequantize_4bit(packed_b, qsb).cpu()

    # AdamW8bit with the defaults: one 8-bit param (4200) and one kept in 32 bit (500).
    p8 = torch.nn.Parameter((torch.randn(4200, generator=g) * 0.1).to(dev))
    p32 = torch.nn.Parameter((torch.randn(500, generator=g) * 0.1).to(dev))
    t["adam.p0"] = p8.detach().cpu().clone()
    t["adam.sp0"] = p32.detach().cpu().clone()
    opt = bnb.optim.AdamW8bit([p8, p32])
    for step in (1, 2, 3):
        g8 = torch.randn(4200, generator=g) * (0.01 * step)
        g32 = torch.randn(500, generator=g) * (0.01 * step)
        t["adam.g%d" % step] = g8
        t["adam.sg%d" % step] = g32
        p8.grad = g8.to(dev)
        p32.grad = g32.to(dev)
        opt.step()
        s8, s32 = opt.state[p8], opt.state[p32]
        t["adam.p%d" % step] = p8.detach().cpu().clone()
        t["adam.q1_%d" % step] = s8["state1"].cpu().clone()
        t["adam.q2_%d" % step] = s8["state2"].cpu().clone()
        t["adam.absmax1_%d" % step] = s8["absmax1"].cpu().clone()
        t["adam.absmax2_%d" % step] = s8["absmax2"].cpu().clone()
        t["adam.sp%d" % step] = p32.detach().cpu().clone()
        t["adam.sm%d" % step] = s32["state1"].cpu().clone()
        t["adam.sv%d" % step] = s32["state2"].cpu().clone()

    t = {k: v.contiguous().clone() for k, v in t.items()}
    meta = {"generator": "tests/golden/gen/gen_formats.py", "torch": torch.__version__,
            "bitsandbytes": bnb.__version__, "device": dev, "seed": str(SEED),
            "device_name": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "formats_%s.safetensors" % dev)
    save_file(t, path, metadata=meta)
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    print("formats/%s  gen=tests/golden/gen/gen_formats.py  torch=%s bitsandbytes=%s device=%s  seed=%d  sha256=%s"
          % (os.path.basename(path), torch.__version__, bnb.__version__, meta["device_name"], SEED, sha))


if __name__ == "__main__":
    main()
