#!/usr/bin/env python3
"""Golden fixture of QLoRA and QDoRA linear layers: PEFT over a bitsandbytes Linear4bit (NF4,
double quantization, blocksize 64), fp32 compute, on the CPU.

  python3 tests/golden/gen/gen_qlora.py [--out DIR]

Writes DIR/qlora_cpu.safetensors (default tests/golden/data/formats) with, for v in (lora, dora):
  {v}.lin.weight + .absmax/.quant_map/.nested_absmax/.nested_quant_map/.quant_state.bitsandbytes__nf4
      the base weight as Linear4bit saves it (W fp32 [12, 128]); {v}.bias F32 [12]
  {v}.A [4, 128], {v}.B [12, 4] (B random, non-zero), {v}.mag [12] (DoRA magnitude, perturbed)
  {v}.x [5, 128], {v}.dy [5, 12]; outputs {v}.y, {v}.dx, {v}.dA, {v}.dB, {v}.dmag (DoRA)
r = 4, lora_alpha = 8, no dropout. Seeded; versions in the metadata and MANIFEST.

C_in is a multiple of the blocksize on purpose: bitsandbytes 0.50's CPU dequantize_4bit indexes
absmax as row·(C_in // blocksize) + col // blocksize for a 2-D weight, which is wrong when
blocksize does not divide C_in (the quantizer's blocks run over the flat tensor). Seen with
[12, 96]: 904 of 1152 dequantized weights differed from the flat-block rule and all 1152 matched
the row rule. ref/nf4 and the CUDA kernels use flat blocks.
"""
import argparse
import hashlib
import os

import bitsandbytes as bnb
import peft
import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file

SEED = 20261123


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = bnb.nn.Linear4bit(128, 12, bias=True, compute_dtype=torch.float32, quant_type="nf4",
                                     compress_statistics=True)

    def forward(self, x):
        return self.lin(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden/data/formats")
    a = ap.parse_args()
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    t = {}
    for v in ("lora", "dora"):
        m = M()
        W = torch.randn(12, 128, generator=g) * 0.05
        m.lin.weight = bnb.nn.Params4bit(W.clone(), requires_grad=False, quant_type="nf4", compress_statistics=True,
                                         blocksize=64)
        m.lin.bias = nn.Parameter(torch.randn(12, generator=g) * 0.1, requires_grad=False)
        m = m.to("cpu")
        assert m.lin.weight.bnb_quantized
        pm = get_peft_model(m, LoraConfig(r=4, lora_alpha=8, target_modules=["lin"], lora_dropout=0.0,
                                          use_dora=(v == "dora")))
        lin = pm.base_model.model.lin
        with torch.no_grad():
            lin.lora_A["default"].weight.copy_(torch.randn(4, 128, generator=g) * 0.1)
            lin.lora_B["default"].weight.copy_(torch.randn(12, 4, generator=g) * 0.1)
            if v == "dora":
                mag = lin.lora_magnitude_vector["default"].weight
                mag.mul_(1 + 0.2 * (torch.rand(12, generator=g) - 0.5))
        x = torch.randn(5, 128, generator=g).requires_grad_(True)
        dy = torch.randn(5, 12, generator=g)
        y = pm(x)
        y.backward(dy)
        qs = m.lin.weight.quant_state
        t[v + ".lin.weight"] = m.lin.weight.data.clone()
        for k, val in qs.as_dict(packed=True).items():
            t[v + ".lin.weight." + k] = val.clone()
        t[v + ".bias"] = m.lin.bias.detach().clone()
        t[v + ".A"] = lin.lora_A["default"].weight.detach().clone()
        t[v + ".B"] = lin.lora_B["default"].weight.detach().clone()
        t[v + ".x"] = x.detach().clone()
        t[v + ".dy"] = dy
        t[v + ".y"] = y.detach().clone()
        t[v + ".dx"] = x.grad.clone()
        t[v + ".dA"] = lin.lora_A["default"].weight.grad.clone()
        t[v + ".dB"] = lin.lora_B["default"].weight.grad.clone()
        if v == "dora":
            t[v + ".mag"] = lin.lora_magnitude_vector["default"].weight.detach().clone()
            t[v + ".dmag"] = lin.lora_magnitude_vector["default"].weight.grad.clone()
    t = {k: val.contiguous().clone() for k, val in t.items()}
    meta = {"generator": "tests/golden/gen/gen_qlora.py", "torch": torch.__version__, "bitsandbytes": bnb.__version__,
            "peft": peft.__version__, "seed": str(SEED)}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "qlora_cpu.safetensors")
    save_file(t, path, metadata=meta)
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    print("formats/qlora_cpu.safetensors  gen=tests/golden/gen/gen_qlora.py  torch=%s bitsandbytes=%s peft=%s  "
          "seed=%d  sha256=%s" % (torch.__version__, bnb.__version__, peft.__version__, SEED, sha))


if __name__ == "__main__":
    main()
