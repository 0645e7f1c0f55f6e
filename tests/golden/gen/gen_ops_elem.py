#!/usr/bin/env python3
"""gen_ops_elem.py — per-op golden fixtures for ref/rmsnorm, ref/rope, ref/swiglu and
ref/cross_entropy, from torch and transformers (issue 6, point 2).

Writes tests/golden/data/ops/:
  rmsnorm.safetensors        transformers LlamaRMSNorm (eps 1e-5), N=7 C=96, forward and autograd
                             backward, once in fp32 and once with the module and input in bf16:
                             {f32,bf16}.{x,w,dy,out,dx,dw}
  rope.safetensors           LlamaRotaryEmbedding with rope_type llama3 + apply_rotary_pos_emb, for
                             D=64 (Llama-3.2 scaling: factor 32) and D=128 (Llama-3.1: factor 8),
                             theta 5e5, low 1, high 4, orig 8192; q (B,T,H,D), k (B,T,KVH,D) in HF's
                             (B,T,heads,D) view (unsqueeze_dim=2); positions (B,T) with a packed
                             restart and long-context positions; forward and autograd backward in
                             fp32 and bf16: d{64,128}.{inv_freq,positions,cos,sin} and
                             d{64,128}.{f32,bf16}.{q,k,q_out,k_out,dq_out,dk_out,dq,dk}
  swiglu.safetensors         the LlamaMLP activation part act_fn(gate) * up (ACT2FN["silu"]), N=9
                             F=160, fp32 and bf16: {f32,bf16}.{gate,up,dout,out,dgate,dup}
  cross_entropy.safetensors  transformers ForCausalLMLoss (labels unshifted, ignore_index -100) on
                             logits = hidden @ W^T (the lm_head), B=2 T=13 C=48 V=173:
                             labels (B,T) with ignored positions, targets (B,T) = the shift the loss
                             applies, {f32,bf16}.{hidden,w,logits,loss,dhidden,dw} and f32.dlogits, with
                             reduction mean; and num_items.{loss,dhidden,dw} with
                             num_items_in_batch = valid + 5 (gradient accumulation form), fp32.
bf16 tensors are stored as BF16, the rest as F32 (loss F64). Every input is drawn from torch.Generator seeded with SEED (printed); none is zero.

Run from the repository root:  python3 tests/golden/gen/gen_ops_elem.py
It appends one MANIFEST line per file to tests/golden/data/MANIFEST (regenerating is deliberate:
delete the old lines of these files first).
"""
import hashlib
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

import safetensors
import transformers
from safetensors import safe_open
from transformers import LlamaConfig
from transformers.activations import ACT2FN
from transformers.loss.loss_utils import ForCausalLMLoss
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

SEED = 20261123
OUT = "tests/golden/data/ops"
GEN = "tests/golden/gen/gen_ops_elem.py"
MANIFEST = "tests/golden/data/MANIFEST"


def gen(seed_offset):
    g = torch.Generator().manual_seed(SEED + seed_offset)
    return g


def randn(g, *shape, std=1.0, mean=0.0):
    return torch.randn(*shape, generator=g, dtype=torch.float32) * std + mean


def leaf(t, dt):
    """A fresh leaf tensor of dtype dt that records its gradient (never shared with t)."""
    return t.detach().clone().to(dt).requires_grad_(True)


def c(t):
    """Contiguous CPU copy for saving: bf16 tensors stay BF16 (the test reads them exactly as
    fp32), everything else fp32."""
    t = t.detach()
    return t.contiguous() if t.dtype == torch.bfloat16 else t.to(torch.float32).contiguous()


def rmsnorm_fixture():
    out = {}
    N, C = 7, 96
    g = gen(1)
    x0 = randn(g, N, C, std=2.0)
    w0 = randn(g, C, std=0.2, mean=1.0)
    dy0 = randn(g, N, C)
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        m = LlamaRMSNorm(C, eps=1e-5)
        with torch.no_grad():
            m.weight.copy_(w0)
        m = m.to(dt)
        x = leaf(x0, dt)
        y = m(x)
        y.backward(dy0.to(dt))
        out[f"{name}.x"] = c(x)
        out[f"{name}.w"] = c(m.weight)
        out[f"{name}.dy"] = c(dy0.to(dt))
        out[f"{name}.out"] = c(y)
        out[f"{name}.dx"] = c(x.grad)
        out[f"{name}.dw"] = c(m.weight.grad)
    return out, {"N": N, "C": C, "eps": 1e-5}


def rope_fixture():
    out = {}
    cases = ((64, 4, 2, 32.0), (128, 2, 1, 8.0))
    B, T = 2, 7
    for D, H, KVH, factor in cases:
        cfg = LlamaConfig(hidden_size=D * H, num_attention_heads=H, num_key_value_heads=KVH, head_dim=D,
                          max_position_embeddings=131072, rope_theta=500000.0,
                          rope_scaling=dict(rope_type="llama3", factor=factor, low_freq_factor=1.0,
                                            high_freq_factor=4.0, original_max_position_embeddings=8192))
        rot = LlamaRotaryEmbedding(cfg)
        g = gen(D)
        # row 0: ordinary positions; row 1: a packed restart (a second sequence starting at 0) and
        # long-context positions, so that every frequency band is exercised at large angles.
        pos = torch.stack([torch.arange(T), torch.tensor([0, 1, 2, 0, 8191, 12000, 16383])])
        out[f"d{D}.inv_freq"] = c(rot.inv_freq)
        out[f"d{D}.positions"] = pos.to(torch.int64).contiguous()
        q0 = randn(g, B, T, H, D)
        k0 = randn(g, B, T, KVH, D)
        dq0 = randn(g, B, T, H, D)
        dk0 = randn(g, B, T, KVH, D)
        for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            q = leaf(q0, dt)
            k = leaf(k0, dt)
            cos, sin = rot(q, pos)  # (B, T, D) in q's dtype
            if name == "f32":
                out[f"d{D}.cos"] = c(cos)
                out[f"d{D}.sin"] = c(sin)
            qo, ko = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
            torch.autograd.backward([qo, ko], [dq0.to(dt), dk0.to(dt)])
            p = f"d{D}.{name}"
            out[f"{p}.q"] = c(q)
            out[f"{p}.k"] = c(k)
            out[f"{p}.q_out"] = c(qo)
            out[f"{p}.k_out"] = c(ko)
            out[f"{p}.dq_out"] = c(dq0.to(dt))
            out[f"{p}.dk_out"] = c(dk0.to(dt))
            out[f"{p}.dq"] = c(q.grad)
            out[f"{p}.dk"] = c(k.grad)
    return out, {"B": B, "T": T, "cases": "D,H,KVH,factor=" + ";".join(",".join(str(v) for v in cs) for cs in cases)}


def swiglu_fixture():
    out = {}
    N, Fw = 9, 160
    g = gen(2)
    gate0 = randn(g, N, Fw, std=2.5)
    up0 = randn(g, N, Fw)
    dout0 = randn(g, N, Fw)
    act = ACT2FN["silu"]
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        gate = leaf(gate0, dt)
        up = leaf(up0, dt)
        y = act(gate) * up  # LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))
        y.backward(dout0.to(dt))
        out[f"{name}.gate"] = c(gate)
        out[f"{name}.up"] = c(up)
        out[f"{name}.dout"] = c(dout0.to(dt))
        out[f"{name}.out"] = c(y)
        out[f"{name}.dgate"] = c(gate.grad)
        out[f"{name}.dup"] = c(up.grad)
    return out, {"N": N, "F": Fw}


def cross_entropy_fixture():
    out = {}
    B, T, C, V = 2, 13, 48, 173
    g = gen(3)
    hidden0 = randn(g, B, T, C)
    w0 = randn(g, V, C, std=0.3)
    labels = torch.randint(0, V, (B, T), generator=g)
    labels[0, 3] = -100
    labels[0, 7:9] = -100
    labels[1, 0] = -100
    labels[1, 10] = -100
    out["labels"] = labels.to(torch.int64).contiguous()
    targets = torch.cat([labels[:, 1:], torch.full((B, 1), -100)], dim=1)  # ForCausalLMLoss's shift
    out["targets"] = targets.to(torch.int64).contiguous()
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        h = leaf(hidden0, dt)
        w = leaf(w0, dt)
        logits = F.linear(h, w)  # lm_head: bf16 logits in a bf16 model
        logits.retain_grad()
        loss = ForCausalLMLoss(logits, labels, vocab_size=V)  # upcasts to fp32, shifts, mean
        loss.backward()
        p = name
        out[f"{p}.hidden"] = c(h)
        out[f"{p}.w"] = c(w)
        out[f"{p}.logits"] = c(logits)
        out[f"{p}.loss"] = loss.detach().to(torch.float64).reshape(1)
        out[f"{p}.dhidden"] = c(h.grad)
        out[f"{p}.dw"] = c(w.grad)
        if name == "f32":
            out[f"{p}.dlogits"] = c(logits.grad)
    # Gradient-accumulation form: sum / num_items_in_batch with more items than this micro-batch.
    n_valid = int((targets != -100).sum())
    h = leaf(hidden0, torch.float32)
    w = leaf(w0, torch.float32)
    loss = ForCausalLMLoss(F.linear(h, w), labels, vocab_size=V, num_items_in_batch=torch.tensor(n_valid + 5))
    loss.backward()
    out["num_items"] = torch.tensor([n_valid + 5], dtype=torch.int64)
    out["num_items.loss"] = loss.detach().to(torch.float64).reshape(1)
    out["num_items.dhidden"] = c(h.grad)
    out["num_items.dw"] = c(w.grad)
    return out, {"B": B, "T": T, "C": C, "V": V, "n_valid": n_valid}


ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float64: "F64", torch.int64: "I64"}


def save_sorted(tensors, path, metadata):
    """A safetensors file with the header keys sorted, so that the bytes (and the MANIFEST sha256)
    are reproducible: safetensors' own writer orders the metadata map differently run to run."""
    header, blobs, off = {"__metadata__": dict(sorted(metadata.items()))}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    js = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for b in blobs:
            f.write(b)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(SEED)
    print(f"seed {SEED}")
    versions = f"torch={torch.__version__} transformers={transformers.__version__} safetensors={safetensors.__version__}"
    lines = []
    for fname, fn in (("rmsnorm", rmsnorm_fixture), ("rope", rope_fixture), ("swiglu", swiglu_fixture),
                      ("cross_entropy", cross_entropy_fixture)):
        tensors, meta = fn()
        meta = {k: str(v) for k, v in meta.items()}
        meta.update({"generator": GEN, "seed": str(SEED), "versions": versions})
        path = os.path.join(OUT, fname + ".safetensors")
        save_sorted(tensors, path, meta)
        with safe_open(path, "pt") as f:  # the official reader must read back every tensor exactly
            assert sorted(f.keys()) == sorted(tensors) and f.metadata() == meta
            for k in tensors:
                assert torch.equal(f.get_tensor(k), tensors[k].contiguous()), k
        sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
        size = os.path.getsize(path)
        print(f"{path}: {len(tensors)} tensors, {size} bytes")
        lines.append(f"ops/{fname}.safetensors  gen={GEN}  {versions}  seed={SEED}  sha256={sha}\n")
    with open(MANIFEST, "a") as f:
        f.writelines(lines)


if __name__ == "__main__":
    sys.exit(main())
