#!/usr/bin/env python3
"""Adapters saved by PEFT itself, for io/peft's reader and writer tests.

A tiny random LlamaForCausalLM (C=32, F=64, L=2, H=4, KVH=2, V=64) wrapped by get_peft_model with
r=4, lora_alpha=8, every Llama Linear targeted, then saved with save_pretrained:
  tests/golden/data/peft/lora/  plain LoRA (lora_B drawn at random so it is not all zeros)
  tests/golden/data/peft/dora/  DoRA (use_dora=True), the same way
Each holds PEFT's adapter_config.json and adapter_model.safetensors (README.md removed).

    python3 tests/golden/gen/gen_peft_reference.py
"""
import os

import peft
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

SEED = 5
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "peft")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main():
    torch.manual_seed(SEED)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=64)
    for name, dora in (("lora", False), ("dora", True)):
        model = get_peft_model(LlamaForCausalLM(cfg),
                               LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, use_dora=dora,
                                          task_type="CAUSAL_LM"))
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.1)
        d = os.path.join(OUT, name)
        model.save_pretrained(d)
        os.remove(os.path.join(d, "README.md"))
        print(d, sorted(os.listdir(d)), "peft", peft.__version__)


if __name__ == "__main__":
    main()
