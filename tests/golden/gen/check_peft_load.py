#!/usr/bin/env python3
"""Checks that PEFT loads adapters written by refine (io/peft) unchanged and computes with them
what refine means by them.

    python3 tests/golden/gen/check_peft_load.py [DIR]

Writes DIR/{lora,dora,rslora} with `bazel run //tests/unit:peft_test -- --write=DIR` (unless DIR
already holds them), builds the tiny random LlamaForCausalLM those adapters are for (C=32, F=64,
L=2, H=4, KVH=2, V=64; torch seed 0), and for each adapter:
  1. PeftModel.from_pretrained(base, dir) with warnings recorded: no warning about missing or
     unexpected adapter keys; set_peft_model_state_dict on the file reports no unexpected keys
     and no missing lora_* keys;
  2. every lora_A / lora_B / lora_magnitude_vector parameter of the PEFT model equals the file, and
     adapter_config.json is byte for byte what json.dumps(indent=2, sort_keys=True) makes of it;
  3. the PEFT model's logits on random tokens equal (max abs diff ≤ 2e-5) those of the base model
     with every targeted weight replaced by the merge computed here from the file:
     W' = W + s·B·A (s = alpha/r, or alpha/sqrt(r) with use_rslora), and for DoRA
     W' = m / ‖W + s·B·A‖_row · (W + s·B·A) (PEFT's DoRA in eval mode, NUMERICS.md §2.2).
Prints one line per adapter and exits 1 on any failure. CPU only.
"""
import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings

import peft
import torch
import transformers
from peft import PeftModel, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")


def base_model():
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=64)
    return LlamaForCausalLM(cfg).eval()


def check(d):
    fails = []
    base = base_model()
    ref = copy.deepcopy(base)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        pm = PeftModel.from_pretrained(base, d).eval()
    for w in rec:
        msg = str(w.message)
        if "missing" in msg.lower() or "unexpected" in msg.lower():
            fails.append("warning: " + msg[:300])
    sd = load_file(os.path.join(d, "adapter_model.safetensors"))
    res = set_peft_model_state_dict(pm, sd)
    if res.unexpected_keys:
        fails.append(f"unexpected keys: {res.unexpected_keys[:4]}")
    missing = [k for k in res.missing_keys if "lora_" in k]
    if missing:
        fails.append(f"missing lora keys: {missing[:4]}")
    params = dict(pm.named_parameters())
    for k, v in sd.items():
        name = k.replace(".lora_A.weight", ".lora_A.default.weight").replace(
            ".lora_B.weight", ".lora_B.default.weight").replace(
            ".lora_magnitude_vector", ".lora_magnitude_vector.default.weight")
        if name not in params:
            fails.append(f"{k}: no parameter {name}")
        elif not torch.equal(params[name].detach(), v):
            fails.append(f"{k}: loaded values differ")
    text = open(os.path.join(d, "adapter_config.json")).read()
    cfg = json.loads(text)
    if json.dumps(cfg, indent=2, sort_keys=True) != text:
        fails.append("adapter_config.json is not laid out as PeftConfig.save_pretrained writes it")
    r, alpha = cfg["r"], cfg["lora_alpha"]
    s = alpha / math.sqrt(r) if cfg["use_rslora"] else alpha / r
    with torch.no_grad():
        sdr = ref.state_dict()
        for k in sd:
            if not k.endswith(".lora_A.weight"):
                continue
            mod = k[len("base_model.model."):-len(".lora_A.weight")]
            if k.replace("lora_A", "lora_B") not in sd:
                fails.append(f"{mod}: no lora_B in the file")
                continue
            A, B = sd[k].double(), sd[k.replace("lora_A", "lora_B")].double()
            W = sdr[mod + ".weight"].double()
            Wp = W + s * (B @ A)
            if cfg["use_dora"]:
                m = sd[k.replace("lora_A.weight", "lora_magnitude_vector")].double()
                Wp = (m / torch.linalg.norm(Wp, dim=1))[:, None] * Wp
            sdr[mod + ".weight"].copy_(Wp.float())
        ids = torch.randint(0, 64, (2, 11), generator=torch.Generator().manual_seed(1))
        got = pm(input_ids=ids).logits
        want = ref(input_ids=ids).logits
        diff = (got - want).abs().max().item()
        base_diff = (base_model()(input_ids=ids).logits - want).abs().max().item()
    if not diff <= 2e-5:
        fails.append(f"logits differ by {diff:.3g}")
    if not base_diff > 1e-3:
        fails.append(f"the adapter changes the logits by only {base_diff:.3g}: the check could not fail")
    return fails, diff, base_diff, len(sd)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="refine_peft_")
    d = os.path.abspath(d)
    if not os.path.exists(os.path.join(d, "lora", "adapter_config.json")):
        subprocess.run(["bazel", "run", "--jobs=2", "//tests/unit:peft_test", "--", f"--write={d}"], cwd=ROOT,
                       check=True)
    print(f"peft {peft.__version__}, transformers {transformers.__version__}, torch {torch.__version__}")
    bad = 0
    for name in ("lora", "dora", "rslora"):
        fails, diff, base_diff, n = check(os.path.join(d, name))
        status = "OK" if not fails else "FAIL"
        print(f"{name}: {status}: {n} tensors; PeftModel.from_pretrained "
              f"{'reported no missing/unexpected keys' if not fails else 'failed the checks below'}; "
              f"max |logits - merged-by-hand logits| = {diff:.3g} (adapter effect {base_diff:.3g})")
        for f in fails:
            print("   ", f)
        bad += bool(fails)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
