#!/usr/bin/env python3
"""check_gguf_export.py — refine's GGUF export (train --export gguf) against llama.cpp's converter
and transformers' GGUF loader.

    python3 tests/golden/gen/check_gguf_export.py RUN_DIR

RUN_DIR is a training run's --out folder after `--export gguf` (it holds merged/, the HF folder,
and model-<type>.gguf). For every model-*.gguf there:
  1. tensors: each GGUF tensor equals what llama.cpp's convert_hf_to_gguf.py writes for the merged
     folder — the bf16 weight of merged/, the q/k rows permuted (LlamaModel.permute), converted by
     gguf-py's quants.quantize to the file's type (F32 for 1-D tensors) — byte for byte;
  2. metadata: architecture, shapes, tokenizer model/pre, token count, chat template present;
  3. logits: transformers loads the GGUF (gguf_file=, dequantized to fp32) and merged/ (fp32) and
     runs a text; the largest logit difference must be within the quantization's error: for
     F16/BF16 the conversions are exact for these weights, so ≤ 1e-4 relative to max|logit|;
     for Q8_0 at most 1.25× the difference of merged/ with its weights passed through gguf-py's
     Q8_0 quantize/dequantize in torch (the same quantization, another implementation).
Prints one line per check and "check_gguf_export: N passed, M failed"; exit 1 on any failure.
"""
import glob
import json
import os
import sys

import numpy as np
import torch

import gguf
import transformers
from gguf import GGUFReader
from gguf.quants import quantize, dequantize
from safetensors.torch import load_file

TEXT = "In the beginning God created the heaven and the earth. And the earth was without form, and void;"
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")


def gguf_name(hf):
    g = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
         "lm_head.weight": "output.weight"}
    if hf in g:
        return g[hf]
    parts = hf.split(".")
    layer, rest = parts[2], ".".join(parts[3:])
    m = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
         "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
         "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
         "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
         "self_attn.v_proj.bias": "attn_v.bias", "mlp.gate_proj.weight": "ffn_gate.weight",
         "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    return f"blk.{layer}.{m[rest]}"


def permute(w, n_head):  # convert_hf_to_gguf.py LlamaModel.permute
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def check_file(run, path):
    cfg = json.load(open(os.path.join(run, "merged", "config.json")))
    merged = load_file(os.path.join(run, "merged", "model.safetensors"))
    r = GGUFReader(path)
    base = os.path.basename(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    check(f"{base}: architecture {arch}", arch == ("qwen2" if cfg["model_type"] == "qwen2" else "llama"))
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    n_tok = len(r.fields["tokenizer.ggml.tokens"].data)
    check(f"{base}: tokenizer gpt2/{pre}, {n_tok} tokens, chat template", n_tok == cfg["vocab_size"]
          and "tokenizer.chat_template" in r.fields)
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    tensors = {t.name: t for t in r.tensors}
    bad = []
    for hf, w in merged.items():
        x = w.float().numpy()
        if arch == "llama" and hf.endswith("q_proj.weight"):
            x = permute(x, H)
        if arch == "llama" and hf.endswith("k_proj.weight"):
            x = permute(x, KVH)
        t = tensors.get(gguf_name(hf))
        if t is None:
            bad.append(f"{hf} missing")
            continue
        qt = gguf.GGMLQuantizationType.F32 if x.ndim == 1 else t.tensor_type
        want = quantize(np.ascontiguousarray(x, dtype=np.float32), qt)
        if t.tensor_type != qt or want.tobytes() != np.asarray(t.data).tobytes():
            bad.append(f"{hf} ({t.tensor_type.name})")
    check(f"{base}: {len(merged)} tensors equal llama.cpp's conversion of merged/", not bad, ", ".join(bad[:4]))
    qtype = max((t.tensor_type for t in r.tensors), key=lambda q: q.value != 0)

    d, f = os.path.split(path)
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
    ids = tok(TEXT, return_tensors="pt").input_ids
    g_model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                                attn_implementation="eager").eval()
    m_model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(run, "merged"), dtype=torch.float32,
                                                                attn_implementation="eager").eval()
    with torch.no_grad():
        zg = g_model(ids).logits[0]
        zm = m_model(ids).logits[0]
        diff = (zg - zm).abs().max().item()
        scale = zm.abs().max().item()
        if qtype in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16):
            check(f"{base}: transformers' logits of the GGUF equal merged/'s (max diff {diff:.3g}, max |z| {scale:.3g})",
                  diff <= 1e-4 * scale)
        else:
            for name, p in m_model.named_parameters():
                if p.ndim == 2:
                    q = dequantize(quantize(p.detach().numpy().astype(np.float32), qtype), qtype)
                    p.copy_(torch.from_numpy(q.reshape(p.shape)))
            ze = m_model(ids).logits[0]
            emul = (ze - zm).abs().max().item()
            check(f"{base}: transformers' logits of the GGUF within the {qtype.name} error (max diff {diff:.3g}; "
                  f"the same quantization in torch {emul:.3g}; max |z| {scale:.3g})", diff <= 1.25 * emul + 1e-6 * scale)


def main():
    run = sys.argv[1]
    files = sorted(glob.glob(os.path.join(run, "model-*.gguf")))
    check(f"{run}: holds merged/ and a model-*.gguf", bool(files) and os.path.isdir(os.path.join(run, "merged")))
    for p in files:
        check_file(run, p)
    print(f"check_gguf_export: {passed} passed, {failed} failed (transformers {transformers.__version__}, "
          f"gguf {gguf.__version__ if hasattr(gguf, '__version__') else 'installed'})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
