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

tiny_llama3_rope.gguf: one layer, with the rope_freqs.weight tensor llama.cpp's converter writes
for Llama 3.1+ rope scaling (factor 32, low 1, high 4, original context 8192).
tiny_qwen2.gguf: one layer of architecture qwen2, with q/k/v biases.

    python3 tests/golden/gen/gen_gguf_tiny.py
"""
import importlib.metadata
import math
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
    write_small("tiny_llama3_rope.gguf", "llama", np.random.default_rng(SEED + 1), rope_factor=32.0)
    write_small("tiny_qwen2.gguf", "qwen2", np.random.default_rng(SEED + 2), rope_factor=None)
    for f in ("tiny_llama.gguf", "tiny_llama_expected.safetensors", "tiny_llama3_rope.gguf", "tiny_qwen2.gguf"):
        print(f, os.path.getsize(os.path.join(OUT_DIR, f)))


def llama3_rope_factors(base, dim, factor, low=1.0, high=4.0, old_context_len=8192):
    """The rope_freqs.weight llama.cpp's converter writes for rope_type "llama3" (restated from
    convert_hf_to_gguf.py LlamaModel.generate_extra_tensors; freqs in float32 as torch computes them)."""
    freqs = 1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    low_wavelen, high_wavelen = old_context_len / low, old_context_len / high
    out = []
    for f in freqs.astype(np.float64):
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_context_len / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_small(fname, arch, rng, rope_factor):
    """One layer, F32/Q8_0 tensors, tied embeddings: a llama with llama3 rope factors (factor 32, as
    Llama 3.2 1B/3B), or a qwen2 with q/k/v biases (which llama.cpp does not permute)."""
    w = gguf.GGUFWriter(os.path.join(OUT_DIR, fname), arch)
    c, f, h, kvh, d, v = 32, 64, 2, 1, 16, 40
    w.add_block_count(1)
    w.add_context_length(131072 if rope_factor else 32768)
    w.add_embedding_length(c)
    w.add_feed_forward_length(f)
    w.add_head_count(h)
    w.add_head_count_kv(kvh)
    w.add_rope_freq_base(500000.0 if rope_factor else 1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_token_list([f"t{i}" for i in range(v)])
    shapes = {"token_embd.weight": (v, c), "output_norm.weight": (c,), "blk.0.attn_norm.weight": (c,),
              "blk.0.attn_q.weight": (h * d, c), "blk.0.attn_k.weight": (kvh * d, c),
              "blk.0.attn_v.weight": (kvh * d, c), "blk.0.attn_output.weight": (c, h * d),
              "blk.0.ffn_norm.weight": (c,), "blk.0.ffn_gate.weight": (f, c), "blk.0.ffn_up.weight": (f, c),
              "blk.0.ffn_down.weight": (c, f)}
    if arch == "qwen2":
        shapes.update({"blk.0.attn_q.bias": (h * d,), "blk.0.attn_k.bias": (kvh * d,),
                       "blk.0.attn_v.bias": (kvh * d,)})
    for name, shape in shapes.items():
        x = rng.standard_normal(shape).astype(np.float32)
        t = Q.Q8_0 if len(shape) == 2 else Q.F32
        w.add_tensor(name, gguf.quants.quantize(x, t), raw_dtype=t)
    if rope_factor:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(500000.0, d, rope_factor))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
