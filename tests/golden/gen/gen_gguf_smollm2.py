#!/usr/bin/env python3
"""Rows of SmolLM2-135M-Instruct (Q4_1 GGUF) as transformers loads them, for io/gguf.

transformers' GGUF loader (modeling_gguf_pytorch_utils.load_gguf_checkpoint) dequantizes each
tensor with the gguf package and undoes llama.cpp's RoPE row permutation of q_proj / k_proj.
This script loads the model that way in float32 and keeps a few rows of a few tensors, chosen to
cover every storage type of the file (Q8_0 embedding, Q4_1 linears, F32 norms) and, for q_proj
and k_proj, rows on both sides of each head's half (where the permutation moves them).

Writes tests/golden/data/gguf/smollm2_q4_1_rows.safetensors: for each chosen HF tensor name N,
N (F32 [k, cols], or the whole 1-D tensor) and N + ".rows" (I64 [k], the row indices).
Metadata: the config values transformers derived from the metadata.

    python3 tests/golden/gen/gen_gguf_smollm2.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import hashlib
import importlib.metadata
import os
import sys

import gguf
import numpy as np
import safetensors
import torch
import transformers
from safetensors.numpy import save_file

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.environ.get("REFINE_CACHE", os.path.expanduser("~/.cache/refine")), "models",
    "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(os.path.dirname(__file__), "..", "data", "gguf", "smollm2_q4_1_rows.safetensors")

PICK = {
    "model.embed_tokens.weight": [0, 1, 2, 1000, 49151],
    "model.layers.0.self_attn.q_proj.weight": [0, 1, 2, 31, 32, 33, 63, 64, 100, 575],
    "model.layers.0.self_attn.k_proj.weight": [0, 1, 31, 32, 63, 64, 150, 191],
    "model.layers.0.self_attn.v_proj.weight": [0, 1, 191],
    "model.layers.0.self_attn.o_proj.weight": [0, 575],
    "model.layers.0.mlp.gate_proj.weight": [0, 1535],
    "model.layers.0.mlp.up_proj.weight": [7],
    "model.layers.0.mlp.down_proj.weight": [0, 575],
    "model.layers.29.self_attn.q_proj.weight": [5, 37, 513],
    "model.layers.29.self_attn.k_proj.weight": [5, 37, 160],
    "model.layers.0.input_layernorm.weight": None,
    "model.layers.29.post_attention_layernorm.weight": None,
    "model.norm.weight": None,
}


def main():
    d, f = os.path.split(os.path.abspath(SRC))
    model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    sd = model.state_dict()
    cfg = model.config
    out = {}
    for name, rows in PICK.items():
        t = sd[name].detach().numpy().astype(np.float32)
        if rows is None:
            out[name] = np.ascontiguousarray(t)
        else:
            out[name] = np.ascontiguousarray(t[rows])
            out[name + ".rows"] = np.array(rows, dtype=np.int64)
    meta = {
        "generator": "tests/golden/gen/gen_gguf_smollm2.py",
        "source_sha256": hashlib.sha256(open(SRC, "rb").read()).hexdigest(),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gguf": importlib.metadata.version("gguf"),
        "safetensors": safetensors.__version__,
        "hidden_size": str(cfg.hidden_size),
        "intermediate_size": str(cfg.intermediate_size),
        "num_hidden_layers": str(cfg.num_hidden_layers),
        "num_attention_heads": str(cfg.num_attention_heads),
        "num_key_value_heads": str(cfg.num_key_value_heads),
        "vocab_size": str(cfg.vocab_size),
        "rms_norm_eps": repr(cfg.rms_norm_eps),
        "rope_theta": repr(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]),
        "max_position_embeddings": str(cfg.max_position_embeddings),
        "tie_word_embeddings": str(bool(cfg.tie_word_embeddings)),
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file(out, OUT, metadata=meta)
    print(OUT, os.path.getsize(OUT), "bytes")
    for k, v in meta.items():
        print(f"  {k} = {v}")


if __name__ == "__main__":
    main()
