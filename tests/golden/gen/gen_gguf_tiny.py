#!/usr/bin/env python3
"""A tiny llama GGUF written by the gguf package, and what the gguf package reads back, for io/gguf.

tiny_llama.gguf: C=32, F=64, L=2, H=2, KVH=1, D=16, V=40 (a made-up 40-token vocabulary), with
tensors in every type refine dequantizes (Q8_0, Q4_0, Q4_1, F16, BF16, F32), an untied output,
general.alignment 64, and metadata keys of every GGUF value type (scalars and arrays, strings
and arrays of strings included).

tiny_llama_expected.safetensors: for every tensor, "gguf:<gguf name>" = gguf.quants.dequantize
of its stored bytes in ggml order (F32, shape = reversed ne), and for q_proj / k_proj
"hf:<HF name>" = the same with transformers' reverse permutation of the rows (LlamaTensorProcessor._reverse_permute_weights,
restated below). Metadata: the seed and versions.

    python3 tests/golden/gen/gen_gguf_tiny.py
"""
import importlib.metadata
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import save_file

SEED = 20261123
HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "data", "gguf")
C, F, L, H, KVH, D, V = 32, 64, 2, 2, 1, 16, 40

HF = {
    "token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(name):
    parts = name.split(".")
    if parts[0] == "blk":
        return f"model.layers.{parts[1]}.{HF[parts[2]]}.{parts[3]}"
    return f"{HF[parts[0]]}.{parts[1]}"


def reverse_permute(w, n_head):
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def main():
    rng = np.random.default_rng(SEED)
    w = gguf.GGUFWriter(os.path.join(OUT_DIR, "tiny_llama.gguf"), "llama")
    w.add_custom_alignment(64)
    w.add_name("tiny llama for refine tests")
    w.add_block_count(L)
    w.add_context_length(256)
    w.add_embedding_length(C)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_rope_dimension_count(D)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_tokenizer_model("gpt2")
    tokens = ["<s>", "</s>", "a", "b", "é", "日本", "\u0120the"] + [f"t{i}" for i in range(V - 7)]
    w.add_token_list(tokens)
    w.add_token_types([1] * V)
    w.add_token_merges(["a b", "\u0120 t"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    # One key of every value type.
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo wörld")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 1.0 / 3.0)
    w.add_array("test.arr_i32", [1, -2, 3])
    w.add_array("test.arr_f32", [0.5, -1.25])
    w.add_array("test.arr_str", ["x", "", "zz"])

    shapes = {"token_embd.weight": (V, C), "output_norm.weight": (C,), "output.weight": (V, C)}
    types = {"token_embd.weight": Q.Q8_0, "output_norm.weight": Q.F32, "output.weight": Q.Q4_0}
    layer_types = [
        {"attn_q": Q.Q4_0, "attn_k": Q.Q4_1, "attn_v": Q.F16, "attn_output": Q.BF16, "ffn_gate": Q.Q8_0,
         "ffn_up": Q.Q4_1, "ffn_down": Q.F32, "attn_norm": Q.F32, "ffn_norm": Q.F32},
        {"attn_q": Q.Q4_1, "attn_k": Q.Q4_0, "attn_v": Q.Q8_0, "attn_output": Q.F16, "ffn_gate": Q.BF16,
         "ffn_up": Q.Q4_0, "ffn_down": Q.Q4_1, "attn_norm": Q.F32, "ffn_norm": Q.F32},
    ]
    lshape = {"attn_q": (H * D, C), "attn_k": (KVH * D, C), "attn_v": (KVH * D, C), "attn_output": (C, H * D),
              "ffn_gate": (F, C), "ffn_up": (F, C), "ffn_down": (C, F), "attn_norm": (C,), "ffn_norm": (C,)}
    for i in range(L):
        for k, s in lshape.items():
            shapes[f"blk.{i}.{k}.weight"] = s
            types[f"blk.{i}.{k}.weight"] = layer_types[i][k]
    expected = {}
    for name, shape in shapes.items():
        x = rng.standard_normal(shape).astype(np.float32) * 0.5
        if len(shape) == 2:
            x[0, :5] = [0.0, -0.0, 1e-8, 65504.0 if types[name] == Q.F16 else 3.0, -2.5]
        t = types[name]
        q = gguf.quants.quantize(x, t)
        w.add_tensor(name, q, raw_dtype=t)
        deq = gguf.quants.dequantize(q, t).astype(np.float32).reshape(shape)
        expected["gguf:" + name] = np.ascontiguousarray(deq)
        if ".attn_q." in name:
            expected["hf:" + hf_name(name)] = np.ascontiguousarray(reverse_permute(deq, H))
        elif ".attn_k." in name:
            expected["hf:" + hf_name(name)] = np.ascontiguousarray(reverse_permute(deq, KVH))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta = {"generator": "tests/golden/gen/gen_gguf_tiny.py", "seed": str(SEED),
            "gguf": importlib.metadata.version("gguf"), "numpy": np.__version__}
    save_file(expected, os.path.join(OUT_DIR, "tiny_llama_expected.safetensors"), metadata=meta)
    for f in ("tiny_llama.gguf", "tiny_llama_expected.safetensors"):
        print(f, os.path.getsize(os.path.join(OUT_DIR, f)))


if __name__ == "__main__":
    main()
