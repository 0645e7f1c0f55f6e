#!/usr/bin/env python3
"""gen_adapters.py — golden fixtures for ref/lora, ref/dora and ref/adamw from PEFT and torch.

Writes tests/golden/data/adapters/:
  lora.safetensors   PEFT LoraConfig(r=4, lora_alpha=8) on an nn.Linear(20 -> 12, bias=True),
                     lora_B drawn random (non-zero) after PEFT's init. Per case <c>:
                       <c>.w, <c>.bias, <c>.lora_a, <c>.lora_b, <c>.x (N=6, C_in), <c>.g (the
                       upstream gradient, loss = sum(g * y)), <c>.y, <c>.dx, <c>.dlora_a,
                       <c>.dlora_b, <c>.scale (the scaling PEFT uses), and for dropout cases
                       <c>.keep (u8 as f32 0/1) and <c>.keep_scale.
                     Cases: "std" (alpha/r, dropout 0), "rslora" (use_rslora, r=3, alpha=5,
                     dropout 0), "drop" (lora_dropout=0.25 whose nn.Dropout is replaced by refine's
                     Philox mask: seed DROP_SEED, offset = case index, as ref/dropout.h draws it).
  dora.safetensors   the same with use_dora=True: also <c>.mag (lora_magnitude_vector, PEFT's init
                     ‖W‖_row perturbed so m/n ≠ 1 at both ends), <c>.wnorm (PEFT's detached
                     get_weight_norm), <c>.dmag. Cases "std", "rslora", "drop".
  adamw.safetensors  torch.optim.AdamW(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                     foreach=False, fused=False) on two tensors p0 (7, 5) and p1 (13,), 10 steps:
                     init.p0/p1, grad.<k>.p0/p1 (k = 1..10), after.<k>.p0/p1, final exp_avg.* and
                     exp_avg_sq.*; then clip_grad_norm_ fixtures: clip.in.<j> (j = 0..2, shapes
                     (4, 6), (9,), (3, 3, 2)), clip.max_norm, clip.total, clip.out.<j> (clipped) and
                     noclip.* (the same grads with max_norm 1e3: unchanged).
Everything fp32 on the CPU. Inputs are drawn from SEED (printed); never zeros.

Run from the repository root:  python3 tests/golden/gen/gen_adapters.py
It appends one MANIFEST line per file to tests/golden/data/MANIFEST.
"""
import hashlib
import os

import numpy as np
import torch

import peft
import safetensors
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file

SEED = 20261127
DROP_SEED = 0x5EED0F00D
N, C_IN, C_OUT = 6, 20, 12
OUT = "tests/golden/data/adapters"
GEN = "tests/golden/gen/gen_adapters.py"


# --- refine's dropout mask (ref/dropout.h), so PEFT sees exactly the mask ref_dropout_mask draws ---
M32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c = list(ctr)
    k0, k1 = key
    for rnd in range(10):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        hi0, lo0 = (p0 >> 32) & M32, p0 & M32
        hi1, lo1 = (p1 >> 32) & M32, p1 & M32
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        if rnd < 9:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
    return c


def refine_keep_mask(n, p, seed, offset):
    key = (seed & M32, seed >> 32)
    pf = np.float32(p)
    keep = np.zeros(n, dtype=np.uint8)
    for e in range(n):
        block, lane = e >> 2, e & 3
        x = philox4x32_10((block & M32, block >> 32, offset & M32, offset >> 32), key)[lane]
        u = np.float32((x >> 8) * 2.0**-24)
        keep[e] = 1 if u >= pf else 0
    return keep


class MaskDropout(torch.nn.Module):
    """Inverted dropout with a fixed mask: x·scale where kept, 0 where dropped (one fp32 product)."""

    def __init__(self, keep, scale):
        super().__init__()
        self.mult = torch.from_numpy(keep.astype(np.float32)) * torch.tensor(scale, dtype=torch.float32)

    def forward(self, x):
        return x * self.mult.reshape(x.shape)


def rnd(gen, *shape, std=1.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * std


def adapter_case(name, case_index, gen, use_dora, r, alpha, rslora, dropout):
    base = torch.nn.Sequential()
    base.add_module("proj", torch.nn.Linear(C_IN, C_OUT, bias=True))
    with torch.no_grad():
        base.proj.weight.copy_(rnd(gen, C_OUT, C_IN, std=0.3))
        base.proj.bias.copy_(rnd(gen, C_OUT))
    cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=["proj"], lora_dropout=dropout, use_rslora=rslora,
                     use_dora=use_dora, bias="none")
    model = get_peft_model(base, cfg)
    layer = model.base_model.model.proj
    with torch.no_grad():
        # PEFT's A init is kept (kaiming_uniform); B is drawn so the adapter contributes.
        layer.lora_B["default"].weight.copy_(rnd(gen, C_OUT, r, std=0.3))
        if use_dora:
            m = layer.lora_magnitude_vector["default"].weight
            m.mul_(1.0 + 0.2 * (torch.rand(C_OUT, generator=gen) - 0.5))
    keep = None
    scale_drop = 1.0
    if dropout > 0:
        keep = refine_keep_mask(N * C_IN, dropout, DROP_SEED, case_index)
        scale_drop = float(np.float32(1.0 / (1.0 - dropout)))
        layer.lora_dropout["default"] = MaskDropout(keep, scale_drop)
    model.train()
    x = rnd(gen, N, C_IN).requires_grad_(True)
    g = rnd(gen, N, C_OUT)
    y = model(x)
    (y * g).sum().backward()
    A = layer.lora_A["default"].weight
    Bw = layer.lora_B["default"].weight
    out = {
        "w": layer.base_layer.weight.detach(),
        "bias": layer.base_layer.bias.detach(),
        "lora_a": A.detach(),
        "lora_b": Bw.detach(),
        "x": x.detach(),
        "g": g,
        "y": y.detach(),
        "dx": x.grad,
        "dlora_a": A.grad,
        "dlora_b": Bw.grad,
        "scale": torch.tensor([layer.scaling["default"]], dtype=torch.float32),
    }
    assert layer.base_layer.weight.grad is None and layer.base_layer.bias.grad is None
    if use_dora:
        mag = layer.lora_magnitude_vector["default"]
        with torch.no_grad():
            lw = mag.get_lora_weight(lora_A=layer.lora_A["default"], lora_B=layer.lora_B["default"])
            wn = mag.get_weight_norm(layer.base_layer.weight, lw, layer.scaling["default"])
        out["mag"] = mag.weight.detach()
        out["dmag"] = mag.weight.grad
        out["wnorm"] = wn.detach()
    if keep is not None:
        out["keep"] = torch.from_numpy(keep.astype(np.float32)).reshape(N, C_IN)
        out["keep_scale"] = torch.tensor([scale_drop], dtype=torch.float32)
    return {f"{name}.{k}": v.contiguous().clone() for k, v in out.items()}


def adapter_file(use_dora, gen):
    t = {}
    t.update(adapter_case("std", 0, gen, use_dora, r=4, alpha=8, rslora=False, dropout=0.0))
    t.update(adapter_case("rslora", 1, gen, use_dora, r=3, alpha=5, rslora=True, dropout=0.0))
    t.update(adapter_case("drop", 2, gen, use_dora, r=4, alpha=8, rslora=False, dropout=0.25))
    return t


def adamw_file(gen):
    t = {}
    p0 = torch.nn.Parameter(rnd(gen, 7, 5))
    p1 = torch.nn.Parameter(rnd(gen, 13))
    t["init.p0"], t["init.p1"] = p0.detach().clone(), p1.detach().clone()
    opt = torch.optim.AdamW([p0, p1], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False,
                            fused=False)
    for k in range(1, 11):
        # Gradients of varying scale, so early steps see v ≈ 0 and later ones a mix.
        s = 10.0 ** (-(k % 4))
        p0.grad = rnd(gen, 7, 5, std=s)
        p1.grad = rnd(gen, 13, std=s)
        t[f"grad.{k}.p0"], t[f"grad.{k}.p1"] = p0.grad.clone(), p1.grad.clone()
        opt.step()
        t[f"after.{k}.p0"], t[f"after.{k}.p1"] = p0.detach().clone(), p1.detach().clone()
    t["exp_avg.p0"] = opt.state[p0]["exp_avg"].clone()
    t["exp_avg.p1"] = opt.state[p1]["exp_avg"].clone()
    t["exp_avg_sq.p0"] = opt.state[p0]["exp_avg_sq"].clone()
    t["exp_avg_sq.p1"] = opt.state[p1]["exp_avg_sq"].clone()

    shapes = [(4, 6), (9,), (3, 3, 2)]
    grads = [rnd(gen, *s) for s in shapes]
    for prefix, max_norm in (("clip", 0.5), ("noclip", 1e3)):
        params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        for p, gr in zip(params, grads):
            p.grad = gr.clone()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
        t[f"{prefix}.max_norm"] = torch.tensor([max_norm], dtype=torch.float32)
        t[f"{prefix}.total"] = total.reshape(1).clone()
        for j, (p, gr) in enumerate(zip(params, grads)):
            t[f"{prefix}.in.{j}"] = gr.clone()
            t[f"{prefix}.out.{j}"] = p.grad.clone()
    return t


def main():
    print(f"gen_adapters: seed {SEED}, dropout seed {DROP_SEED:#x}")
    torch.manual_seed(SEED)  # PEFT's kaiming_uniform init of A draws from the global generator
    gen = torch.Generator().manual_seed(SEED)
    os.makedirs(OUT, exist_ok=True)
    versions = f"torch={torch.__version__} peft={peft.__version__} safetensors={safetensors.__version__}"
    # One metadata key: safetensors writes __metadata__ from a hash map, so with several keys their
    # order (and the file's sha256) changes from run to run.
    meta = {"source": f"{GEN} seed={SEED} dropout_seed={DROP_SEED:#x} {versions}"}
    files = {
        "lora.safetensors": adapter_file(False, gen),
        "dora.safetensors": adapter_file(True, gen),
        "adamw.safetensors": adamw_file(gen),
    }
    lines = []
    for fname, tensors in files.items():
        path = os.path.join(OUT, fname)
        save_file(tensors, path, metadata=meta)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        size = os.path.getsize(path)
        print(f"  {path}: {len(tensors)} tensors, {size} bytes")
        lines.append(f"adapters/{fname}  gen={GEN}  {versions}  seed={SEED}  sha256={digest}\n")
    with open("tests/golden/data/MANIFEST", "a") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
