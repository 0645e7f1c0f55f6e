"""Writes config.json files the way transformers 5 saves them (rope_parameters, dtype), for
tests/unit/config_test.c:  python3 tests/unit/testdata/configs/gen_configs_v5.py tests/unit/testdata/configs
"""
import json
import os
import sys
import tempfile

import transformers
from transformers import BitsAndBytesConfig, LlamaConfig, MistralConfig, Qwen2Config


def save(cfg, out):
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        with open(os.path.join(d, "config.json")) as f:
            text = f.read()
    with open(out, "w") as f:
        f.write(text)


def main():
    d = sys.argv[1]
    rope = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
    save(LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
                     rms_norm_eps=1e-5, rope_parameters=rope, tie_word_embeddings=True, bos_token_id=128000,
                     eos_token_id=[128001, 128008, 128009], dtype="bfloat16",
                     architectures=["LlamaForCausalLM"]), f"{d}/v5-llama-3.2-1b.json")
    q = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                    num_key_value_heads=2, vocab_size=151936, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                    tie_word_embeddings=True, use_sliding_window=True, sliding_window=4096, max_window_layers=21,
                    bos_token_id=151643, eos_token_id=151645, dtype="bfloat16")
    save(q, f"{d}/v5-qwen2-window.json")
    m = MistralConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=2, vocab_size=1000, sliding_window=None, dtype="float32")
    m.quantization_config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="fp4",
                                               bnb_4bit_compute_dtype="float16").to_dict()
    save(m, f"{d}/v5-mistral-bnb-fp4.json")
    print("transformers", transformers.__version__)


if __name__ == "__main__":
    main()
