"""Writes tiny HF model folders with transformers (and bitsandbytes) for
tests/unit/model_files_test.c, so that the loader is checked against the names, shapes, dtypes
and bnb-4bit layout the real libraries produce:

    python3 tests/unit/testdata/gen_model_files.py tests/unit/testdata/models

  llama_tied_bf16/  LlamaForCausalLM, tied embeddings, bf16, GQA 4:2
  qwen2_f16/        Qwen2ForCausalLM (q/k/v biases), untied, f16, GQA 3:1
  llama_bnb_nf4/    LlamaForCausalLM quantized by bitsandbytes: NF4, double quantization,
                    compute dtype bf16, untied (lm_head stays unquantized)
"""
import os
import shutil
import sys
import tempfile

import bitsandbytes
import torch
import transformers
from transformers import BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM


def keep(src, dst):
    os.makedirs(dst, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(src, f), os.path.join(dst, f))


def main():
    out = sys.argv[1]
    torch.manual_seed(1234)
    small = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, vocab_size=64, max_position_embeddings=256)
    with tempfile.TemporaryDirectory() as d:
        m = LlamaForCausalLM(LlamaConfig(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                         **small)).to(torch.bfloat16)
        m.save_pretrained(d)
        keep(d, f"{out}/llama_tied_bf16")
    with tempfile.TemporaryDirectory() as d:
        m = Qwen2ForCausalLM(Qwen2Config(num_attention_heads=3, num_key_value_heads=1, head_dim=16,
                                         tie_word_embeddings=False, **{**small, "hidden_size": 48})).to(torch.float16)
        m.save_pretrained(d)
        keep(d, f"{out}/qwen2_f16")
    with tempfile.TemporaryDirectory() as d:
        m = LlamaForCausalLM(LlamaConfig(num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False,
                                         **{**small, "hidden_size": 64, "intermediate_size": 96}))
        m.to(torch.bfloat16).save_pretrained(d + "/plain")
        q = LlamaForCausalLM.from_pretrained(
            d + "/plain", device_map="cpu",
            quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                   bnb_4bit_use_double_quant=True,
                                                   bnb_4bit_compute_dtype=torch.bfloat16))
        q.save_pretrained(d + "/q")
        keep(d + "/q", f"{out}/llama_bnb_nf4")
    print("transformers", transformers.__version__, "bitsandbytes", bitsandbytes.__version__, "torch", torch.__version__)


if __name__ == "__main__":
    main()
