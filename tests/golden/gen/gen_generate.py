#!/usr/bin/env python3
"""gen_generate.py — golden fixtures for generation (ref/generate.h, ref/sample.h) from transformers.

Writes tests/golden/data/generate/:
  tiny.safetensors   greedy continuations by transformers' generate() (fp32, eager attention, CPU,
                     KV cache, do_sample=False, no end-of-sequence id: all NEW tokens) of the two tiny
                     golden models (tests/golden/data/e2e/{llama,qwen2}) and of the tiny Llama with a
                     PEFT LoRA and a PEFT DoRA adapter (the PeftModel, unmerged):
                       <case>.prompt (P,) I64, <case>.ids (NEW,) I64 (generated ids),
                       <case>.margin (NEW,) F32 (top-1 minus top-2 logit at each step: how far each
                       choice is from a tie)
                     cases: llama, qwen2, llama_lora, llama_dora
  llama_lora/, llama_dora/   the adapters (PEFT save_pretrained: adapter_config.json +
                     adapter_model.safetensors; r=4, alpha=8, all seven targets, lora_B ~ N(0, 0.2²))
  smollm2.safetensors  greedy continuations of SmolLM2-135M-Instruct (the Q4_1 GGUF of tools/setup.sh,
                     loaded by transformers' GGUF loader, fp32, eager) for two prompts:
                       text: a plain text prompt (tokenizer(text), BOS as the tokenizer adds it),
                             96 new tokens, end-of-sequence ids disabled;
                       chat: a one-turn conversation through apply_chat_template(add_generation_prompt
                             =True), up to 128 new tokens, stopping at <|im_end|> (the GGUF's eos);
                     <case>.prompt, <case>.ids, <case>.margin as above, <case>.text_bytes (the
                     completion as tokenizer.decode(ids, skip_special_tokens=True,
                     clean_up_tokenization_spaces=False), UTF-8 bytes as I64)
  processors.safetensors  transformers' logits processors on random rows (V=300): rows (4, V) F32,
                     prev (4, 12) I64 (the sequences so far, with repeats), and per case
                     <case>.out (4, V) F32 = the processed scores: rep (repetition_penalty 1.3),
                     temp (temperature 0.7), topk (top_k 20), topp (top_p 0.9), all (rep 1.2,
                     temperature 0.8, top_k 40, top_p 0.95), in generate()'s order (the processor,
                     then temperature, top-k, top-p).
The generator checks that every greedy step's margin is above MIN_MARGIN (no near tie that fp32
rounding could flip) and stops with an error otherwise. Appends one MANIFEST line per file.

Run from the repository root:  python3 tests/golden/gen/gen_generate.py
"""
import hashlib
import importlib.metadata
import json
import os
import shutil

import torch

import peft
import safetensors
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import GenerationConfig
from transformers.generation.logits_process import (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                                                    TopKLogitsWarper, TopPLogitsWarper)

SEED = 20261201
NEW = 64
MIN_MARGIN = 1e-4
E2E = "tests/golden/data/e2e"
OUT = "tests/golden/data/generate"
GEN = "tests/golden/gen/gen_generate.py"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_TEXT = "In the beginning God created the heaven and the earth. And the earth was without form, and void;"
SMOL_NEW = {"text": 96, "chat": 128}
SMOL_CHAT = [{"role": "user", "content": "Name three colours of the rainbow."}]


def versions():
    return (f"torch={torch.__version__} transformers={transformers.__version__} peft={peft.__version__} "
            f"safetensors={safetensors.__version__} gguf={importlib.metadata.version('gguf')}")


def greedy(model, prompt, eos, pad, new=NEW):
    # the model's own generation_config must not bring its end-of-sequence id back in
    model.generation_config.eos_token_id = eos
    cfg = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=eos, pad_token_id=pad,
                           temperature=None, top_k=None, top_p=None)
    with torch.no_grad():
        out = model.generate(input_ids=prompt[None, :], attention_mask=torch.ones_like(prompt)[None, :],
                             generation_config=cfg, output_scores=True, return_dict_in_generate=True)
    ids = out.sequences[0, prompt.shape[0]:]
    margins = []
    for s in out.scores:
        top = torch.topk(s[0].float(), 2).values
        margins.append((top[0] - top[1]).item())
    return ids.clone(), torch.tensor(margins, dtype=torch.float32)


def check_margins(case, m):
    worst = m.min().item()
    print(f"{case}: {m.numel()} tokens, smallest margin {worst:.3g}")
    if worst < MIN_MARGIN:
        raise SystemExit(f"{case}: a near tie (margin {worst:.3g} < {MIN_MARGIN}); choose another prompt")


def tiny(manifest):
    t = {}
    gen = torch.Generator().manual_seed(SEED)
    for name, cls in (("llama", transformers.LlamaForCausalLM), ("qwen2", transformers.Qwen2ForCausalLM)):
        d = os.path.join(E2E, name)
        model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        V = model.config.vocab_size
        prompt = torch.randint(0, V, (12,), generator=gen, dtype=torch.int64)
        ids, m = greedy(model, prompt, None, 0)
        check_margins(name, m)
        t[f"{name}.prompt"], t[f"{name}.ids"], t[f"{name}.margin"] = prompt, ids, m
        if name != "llama":
            continue
        for kind, dora in (("lora", False), ("dora", True)):
            base = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
            torch.manual_seed(SEED + (1 if dora else 0))
            pm = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, use_dora=dora,
                                                 task_type="CAUSAL_LM"))
            with torch.no_grad():
                for n, p in pm.named_parameters():
                    if "lora_B" in n:
                        p.normal_(0, 0.2)
            ad = os.path.join(OUT, f"llama_{kind}")
            shutil.rmtree(ad, ignore_errors=True)
            pm.save_pretrained(ad)
            for extra in os.listdir(ad):
                if extra not in ("adapter_config.json", "adapter_model.safetensors"):
                    os.remove(os.path.join(ad, extra))
            pm.eval()
            ids, m = greedy(pm, prompt, None, 0)
            case = f"llama_{kind}"
            check_margins(case, m)
            t[f"{case}.prompt"], t[f"{case}.ids"], t[f"{case}.margin"] = prompt.clone(), ids, m
            for f in ("adapter_config.json", "adapter_model.safetensors"):
                manifest.append(os.path.join(ad, f))
    path = os.path.join(OUT, "tiny.safetensors")
    save_file(t, path, metadata={"generator": GEN, "seed": str(SEED), "versions": versions()})
    manifest.append(path)


def smollm2(manifest):
    cache = os.environ.get("REFINE_CACHE", os.path.expanduser("~/.cache/refine"))
    d = os.path.join(cache, "models")
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=SMOL)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=SMOL, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    eos = model.config.eos_token_id
    t = {}
    cases = (("text", tok(SMOL_TEXT, return_tensors="pt").input_ids[0], None),
             ("chat", tok.apply_chat_template(SMOL_CHAT, add_generation_prompt=True, return_tensors="pt",
                                              return_dict=True)["input_ids"][0], eos))
    for case, prompt, stop in cases:
        ids, m = greedy(model, prompt, stop, eos if eos is not None else 0, SMOL_NEW[case])
        check_margins(case, m)
        text = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        print(f"{case}: prompt {prompt.tolist()}\n  -> {ids.tolist()}\n  {text!r}")
        t[f"{case}.prompt"], t[f"{case}.ids"], t[f"{case}.margin"] = prompt.to(torch.int64), ids, m
        t[f"{case}.text_bytes"] = torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)
    src_sha = hashlib.sha256(open(os.path.join(d, SMOL), "rb").read()).hexdigest()
    path = os.path.join(OUT, "smollm2.safetensors")
    save_file(t, path, metadata={"generator": GEN, "gguf": SMOL, "gguf_sha256": src_sha, "versions": versions(),
                                 "eos": json.dumps(eos)})
    manifest.append(path)


def processors(manifest):
    gen = torch.Generator().manual_seed(SEED + 7)
    V = 300
    rows = torch.randn((4, V), generator=gen, dtype=torch.float32) * 3.0
    prev = torch.randint(0, V, (4, 12), generator=gen, dtype=torch.int64)
    prev[:, 6:] = prev[:, :6]  # repeats: the penalty applies once per distinct token
    cases = {
        "rep": [RepetitionPenaltyLogitsProcessor(1.3)],
        "temp": [TemperatureLogitsWarper(0.7)],
        "topk": [TopKLogitsWarper(20)],
        "topp": [TopPLogitsWarper(0.9)],
        "all": [RepetitionPenaltyLogitsProcessor(1.2), TemperatureLogitsWarper(0.8), TopKLogitsWarper(40),
                TopPLogitsWarper(0.95)],
    }
    t = {"rows": rows, "prev": prev}
    for name, procs in cases.items():
        s = rows.clone()
        for p in procs:
            s = p(prev, s)
        t[f"{name}.out"] = s.contiguous().clone()
        print(f"{name}: {(s > -float('inf')).sum(-1).tolist()} tokens kept per row")
    path = os.path.join(OUT, "processors.safetensors")
    save_file(t, path, metadata={"generator": GEN, "seed": str(SEED + 7), "versions": versions()})
    manifest.append(path)


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    files = []
    tiny(files)
    processors(files)
    smollm2(files)
    with open("tests/golden/data/MANIFEST", "a") as f:
        for p in files:
            h = hashlib.sha256(open(p, "rb").read()).hexdigest()
            f.write(f"{os.path.relpath(p, 'tests/golden/data')}  gen={GEN}  {versions()}  seed={SEED}  sha256={h}\n")


if __name__ == "__main__":
    main()
