#!/usr/bin/env python3
"""gen_smollm2.py — logits of the real SmolLM2-135M-Instruct (the Q4_1 GGUF that tools/setup.sh
fetches into $REFINE_CACHE/models/) from transformers loading that same GGUF (gguf_file=, with the
`gguf` package, which dequantizes Q4_1 to fp32), on a short text.

Writes tests/golden/data/e2e/smollm2/logits.safetensors:
  input_ids  (1, T) I64   the text tokenized by transformers from the GGUF's tokenizer metadata (no
                          special tokens added)
  text_bytes (n,)   I64   the text's UTF-8 bytes, for refine's tokenizer to reproduce input_ids
  positions  (P,)   I64   the positions whose logits are kept (the first, two inner, the last)
  logits     (P, V) F32   fp32 logits at those positions (eager attention, fp32, eval mode)
  loss       (1,)   F32   the causal-LM loss of the whole text (labels = input_ids)
and appends its MANIFEST line to tests/golden/data/MANIFEST. Only P = 4 positions are kept to keep
the fixture small (4 × 49152 floats). Nothing is random: no seed.

Run from the repository root:  python3 tests/golden/gen/gen_smollm2.py
"""
import hashlib
import importlib.metadata
import json
import os

import torch

import gguf
import safetensors
import transformers
from safetensors.torch import save_file

TEXT = "The quick brown fox jumps over the lazy dog. Fine-tuning small models on a laptop is fun!"
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = "tests/golden/data/e2e/smollm2/logits.safetensors"
GEN = "tests/golden/gen/gen_smollm2.py"


def main():
    torch.set_num_threads(2)
    cache = os.environ.get("REFINE_CACHE", os.path.expanduser("~/.cache/refine"))
    d = os.path.join(cache, "models")
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=NAME)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=NAME, dtype=torch.float32,
                                                              attn_implementation="eager")
    model.eval()
    ids = tok(TEXT, add_special_tokens=False, return_tensors="pt").input_ids
    T = ids.shape[1]
    pos = torch.tensor([0, T // 3, (2 * T) // 3, T - 1], dtype=torch.int64)
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    logits = out.logits[0, pos].float().contiguous()
    versions = (f"torch {torch.__version__}, transformers {transformers.__version__}, "
                f"gguf {importlib.metadata.version('gguf')}, safetensors {safetensors.__version__}")
    src_sha = hashlib.sha256(open(os.path.join(d, NAME), "rb").read()).hexdigest()
    meta = {"generator": GEN, "versions": versions, "text": TEXT, "gguf": NAME, "gguf_sha256": src_sha, "T": str(T)}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    text_bytes = torch.tensor(list(TEXT.encode("utf-8")), dtype=torch.int64)
    save_file({"input_ids": ids.contiguous(), "text_bytes": text_bytes, "positions": pos, "logits": logits,
               "loss": out.loss.detach().reshape(1).float()}, OUT,
              metadata={"meta": json.dumps(meta, sort_keys=True)})
    h = hashlib.sha256(open(OUT, "rb").read()).hexdigest()
    with open("tests/golden/data/MANIFEST", "a") as f:
        f.write(f"{OUT} generator={GEN} seed=none {versions} gguf={NAME} gguf_sha256={src_sha} sha256={h}\n")
    print(f"T={T} ids={ids.tolist()} loss={out.loss.item():.6f} argmax={logits.argmax(-1).tolist()}")
    print(model.config)


if __name__ == "__main__":
    main()
