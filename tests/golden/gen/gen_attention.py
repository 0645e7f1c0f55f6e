#!/usr/bin/env python3
"""gen_attention.py — golden fixture for ref/attention from transformers' eager attention.

Writes tests/golden/data/ops/attention.safetensors. For each case cN (shapes below; B, T, H, KVH,
D also in the metadata) it holds
  cN.q, cN.dout  (B, T, H, D)    BF16   inputs, standard normal rounded to bf16, so the stored
  cN.k, cN.v     (B, T, KVH, D)  BF16   values are the exact fp32 inputs (flash-attention's rule)
  cN.out         (B, T, H, D)    F32    transformers' eager_attention_forward in fp32 on the CPU,
                                         transposed back to refine's layout (B, T, H, D)
  cN.lse         (B, H, T)       F32    torch.logsumexp of the same masked, scaled fp32 scores
  cN.dq, cN.dv, cN.dk            F32    autograd of sum(out * dout) through that forward
  cN.err         (5, 2)          F32    for out, lse, dq, dk, dv: the max and the rms of
                                         |eager fp32 − exact|, "exact" being the same math in
                                         float64 (repeat_kv, causal mask, softmax in float64)
Semantics (transformers 5.x modeling_llama.eager_attention_forward, NUMERICS.md §7.2): the kv heads
go through transformers' repeat_kv (query head h reads kv head h // (H/KVH)), scores are
q·kᵀ·D^-0.5 plus an additive causal mask of finfo(float32).min above the diagonal, softmax in
float32, then P·V. The module argument only supplies num_key_value_groups and training=False.

Run from the repository root:  python3 tests/golden/gen/gen_attention.py
It prints the seed and the float64 errors and appends one MANIFEST line to
tests/golden/data/MANIFEST. The file is deterministic (same bytes, same sha256) for the same torch.
"""
import hashlib
import json
import math
import os
import sys

import safetensors
import torch
import transformers
from safetensors.torch import save_file
from transformers.models.llama.modeling_llama import eager_attention_forward, repeat_kv

SEED = 20261123
GEN = "tests/golden/gen/gen_attention.py"
OUT = "tests/golden/data/ops/attention.safetensors"
# (B, T, H, KVH, D): T = 1 (a row that sees only itself), 17 (not a multiple of any tile), 64 (one
# GPU tile); GQA ratios 4, 3 and 4. Kept small: the file is ~470 KB.
CASES = [
    (2, 1, 8, 2, 64),
    (2, 17, 6, 2, 64),
    (1, 64, 4, 1, 64),
]


class _Module:
    """The two attributes eager_attention_forward reads from its attention module."""

    def __init__(self, groups):
        self.num_key_value_groups = groups
        self.training = False


def causal_mask(T, dtype):
    m = torch.full((T, T), torch.finfo(dtype).min, dtype=dtype)
    return torch.triu(m, diagonal=1)[None, None]  # (1, 1, T, T): 0 on and below the diagonal


def eager_fp32(q, k, v, dout, H, KVH):
    """transformers' eager attention in fp32; tensors in refine's (B, T, heads, D) layout."""
    D = q.shape[-1]
    T = q.shape[1]
    qh = q.transpose(1, 2).contiguous().requires_grad_(True)  # (B, H, T, D), HF's layout
    kh = k.transpose(1, 2).contiguous().requires_grad_(True)
    vh = v.transpose(1, 2).contiguous().requires_grad_(True)
    scaling = D**-0.5
    mask = causal_mask(T, torch.float32)
    out, _ = eager_attention_forward(_Module(H // KVH), qh, kh, vh, mask, scaling, dropout=0.0)
    (out * dout).sum().backward()  # out is (B, T, H, D) already (eager transposes back)
    with torch.no_grad():
        s = torch.matmul(qh, repeat_kv(kh, H // KVH).transpose(2, 3)) * scaling + mask
        lse = torch.logsumexp(s, dim=-1)  # (B, H, T)
    return (out.detach(), lse, qh.grad.transpose(1, 2).contiguous(), kh.grad.transpose(1, 2).contiguous(),
            vh.grad.transpose(1, 2).contiguous())


def exact_f64(q, k, v, dout, H, KVH):
    """The same math in float64 throughout (softmax included): the yardstick for eager's error."""
    D = q.shape[-1]
    T = q.shape[1]
    qh = q.double().transpose(1, 2).contiguous().requires_grad_(True)
    kh = k.double().transpose(1, 2).contiguous().requires_grad_(True)
    vh = v.double().transpose(1, 2).contiguous().requires_grad_(True)
    s = torch.matmul(qh, repeat_kv(kh, H // KVH).transpose(2, 3)) * (1.0 / math.sqrt(D))
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)
    out = torch.matmul(p, repeat_kv(vh, H // KVH)).transpose(1, 2)
    (out * dout.double()).sum().backward()
    return (out.detach(), lse.detach(), qh.grad.transpose(1, 2), kh.grad.transpose(1, 2), vh.grad.transpose(1, 2))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # one summation order for the fp32 CPU kernels
    gen = torch.Generator().manual_seed(SEED)
    print(f"seed {SEED}; torch {torch.__version__}, transformers {transformers.__version__}")
    tensors = {}
    for n, (B, T, H, KVH, D) in enumerate(CASES):

        def draw(*shape):
            return torch.randn(*shape, generator=gen, dtype=torch.float32).to(torch.bfloat16)

        q, k, v, dout = draw(B, T, H, D), draw(B, T, KVH, D), draw(B, T, KVH, D), draw(B, T, H, D)
        f32 = [x.float() for x in (q, k, v, dout)]
        got = eager_fp32(*f32, H, KVH)
        ref = exact_f64(*f32, H, KVH)
        err = []
        for name, g, r in zip(("out", "lse", "dq", "dk", "dv"), got, ref):
            e = (g.double() - r).abs()
            err.append([e.max().item(), e.pow(2).mean().sqrt().item()])
            # The yardstick must itself be sound: eager fp32 within fp32 accuracy of the float64 math
            # (a semantic difference would show up as an O(1) error here).
            scale = r.abs().max().item() + 1.0
            assert err[-1][0] <= 1e-4 * scale, f"case {n} {name}: eager fp32 is {err[-1][0]} from float64"
            print(f"c{n} B={B} T={T} H={H} KVH={KVH} D={D} {name}: |eager32 - f64| max {err[-1][0]:.3g} "
                  f"rms {err[-1][1]:.3g}")
        p = f"c{n}."
        tensors[p + "q"], tensors[p + "k"], tensors[p + "v"], tensors[p + "dout"] = q, k, v, dout
        for name, g in zip(("out", "lse", "dq", "dk", "dv"), got):
            tensors[p + name] = g.float().contiguous()
        tensors[p + "err"] = torch.tensor(err, dtype=torch.float32)
    meta = {
        "generator": GEN,
        "seed": str(SEED),
        "cases": [list(c) for c in CASES],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    # One metadata key: safetensors writes the metadata map in hash order, and several keys would
    # make the bytes (and the sha256) differ from run to run.
    save_file(tensors, OUT, metadata={"meta": json.dumps(meta, sort_keys=True)})
    line = (f"ops/attention.safetensors  gen={GEN}  torch={torch.__version__} transformers={transformers.__version__}"
            f" safetensors={safetensors.__version__}  seed={SEED}  sha256={sha256(OUT)}")
    with open("tests/golden/data/MANIFEST", "a") as f:
        f.write(line + "\n")
    print(f"{OUT}: {os.path.getsize(OUT)} bytes")
    print(line)


if __name__ == "__main__":
    sys.exit(main())
