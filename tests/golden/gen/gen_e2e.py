#!/usr/bin/env python3
"""gen_e2e.py — end-to-end golden fixtures for ref/llama from transformers + PEFT (+ bitsandbytes).

Writes tests/golden/data/e2e/<model>/ for two tiny random models:
  llama  Llama-3-like: L=2, C=64, H=4, KVH=1 (GQA 4:1), D=16, F=160, V=256, tied embeddings,
         rope_scaling llama3 (theta 5e5, factor 32, orig 8192: with D=16 the pairs fall in all three
         bands — kept, smoothed, divided), rms eps 1e-5.
  qwen2  Qwen2-like: L=3, C=96, H=6, KVH=2 (GQA 3:1), D=16, F=224, V=300, q/k/v bias, untied head.
Files per model:
  config.json         the HF config (transformers writes it; io/config.h reads it)
  model.safetensors   weights with HF names (tied: no lm_head.weight), stored BF16 but drawn as
                      bf16-representable values, so they are the exact fp32 weights
  inputs.safetensors  input_ids (B,T) I64, labels (B,T) I64 in HF form (-100 = ignored; the model
                      shifts them), targets (B,T) I64 = labels shifted left by one (what position t
                      predicts; -100 at t = T-1), the shift that ForCausalLMLoss applies
  full.safetensors    full fine-tuning: logits (B,T,V), loss, grad.<hf name> for every parameter,
                      traj_loss (6: the loss before each of 5 AdamW steps and after the last),
                      final.<hf name> (the weights after 5 steps, only for FULL_FINAL_SUBSET and
                      the 1-D tensors, to keep the fixtures small)
  lora.safetensors    PEFT LoRA r=4, alpha=8 on all seven linears, dropout 0, lora_B random
                      (non-zero): adapter.<peft name> (initial adapter weights, PEFT file names),
                      logits, loss, grad.<peft name>, traj_loss, final.<peft name>
  dora.safetensors    the same with use_dora=True (magnitude initialised by PEFT to ‖W‖_row while
                      B was zero, so m/‖W + sBA‖ ≠ 1 once B is drawn)
  qlora.safetensors,  (llama only) the seven base linears quantized to NF4 by bitsandbytes (CPU
  qdora.safetensors   backend, blocksize 32 (see NF4_BLOCKSIZE), double quantization, compute dtype fp32), LoRA/DoRA on
                      top: qlora holds base.<hf name> (the dequantized weight the forward multiplies
                      by, fp32) and nf4.<hf name>.* (the packed checkpoint tensors of HF's bnb-4bit
                      format); qdora uses the same quantized base (checked identical) and does not
                      repeat it; then the same tensors as lora/dora.
AdamW: torch.optim.AdamW(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01), the same batch
every step, attention "eager", everything fp32 on the CPU.

Run from the repository root:  python3 tests/golden/gen/gen_e2e.py
It prints the seeds and appends one MANIFEST line per file to tests/golden/data/MANIFEST.
"""
import hashlib
import json
import os
import sys

import torch

import peft
import safetensors
import transformers
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file

SEED = 20261123
B, T = 2, 24
LR, WD, BETAS, EPS, STEPS = 1e-2, 0.01, (0.9, 0.999), 1e-8, 5
R, ALPHA = 4, 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
OUT = "tests/golden/data/e2e"
# NF4 blocksize of the QLoRA/QDoRA fixtures. Not bitsandbytes' default 64: its CPU dequantization
# kernel (bitsandbytes 0.50.2, cdequantize_blockwise_cpu_nf4_fp32) indexes absmax as if no block
# straddled two rows, so a weight whose row length is not a multiple of the blocksize (down_proj,
# in = F = 160) comes back with the wrong scales (round-trip error 0.21 where NF4 allows ~0.05);
# CUDA and the flat layout of the format are right. With 32 every row holds whole blocks, and
# flat_dequantize below checks that bitsandbytes' result is the format's.
NF4_BLOCKSIZE = 32
GEN = "tests/golden/gen/gen_e2e.py"

# Full fine-tuning keeps the final weights of every 1-D tensor (norms, biases) and of these:
# the loss trajectory checks the rest, and the fixtures stay small.
FULL_FINAL_SUBSET = []


def model_configs():
    llama = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        tie_word_embeddings=True, max_position_embeddings=131072, bos_token_id=1, eos_token_id=2)
    qwen2 = transformers.Qwen2Config(
        vocab_size=300, hidden_size=96, intermediate_size=224, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        max_position_embeddings=4096, use_sliding_window=False, bos_token_id=1, eos_token_id=2)
    return {"llama": (llama, transformers.LlamaForCausalLM), "qwen2": (qwen2, transformers.Qwen2ForCausalLM)}


def randomize(model, gen):
    """Every parameter drawn from the seeded generator: matrices N(0, 0.1²), norm weights
    1 + N(0, 0.1²), biases N(0, 0.1²), each rounded to bf16. Nothing is zero or one."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            z = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            v = 1.0 + 0.1 * z if name.endswith("norm.weight") else 0.1 * z
            # bf16-representable values, so model.safetensors stores them exactly in BF16 (half
            # the bytes); the model itself computes in fp32.
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def make_inputs(V, gen):
    ids = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    labels = ids.clone()
    labels[0, :7] = -100  # a prompt region
    labels[1, 17:] = -100  # padding at the end
    targets = torch.full_like(labels, -100)
    targets[:, :-1] = labels[:, 1:]
    return ids, labels, targets


def fwd(model, ids, labels):
    out = model(input_ids=ids, labels=labels)
    return out.logits, out.loss


def peft_name(n):
    """A named_parameters() name of a PeftModel → the key PEFT writes in adapter_model.safetensors."""
    n = n.replace(".default", "")
    if n.endswith("lora_magnitude_vector.weight"):
        n = n[: -len(".weight")]
    return n


def trainables(model, peft_names):
    ps = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [((peft_name(n) if peft_names else n), p) for n, p in ps]


def grads_and_traj(model, ids, labels, peft_names, final_filter=None):
    """logits, loss and every gradient at the initial weights, then a 5-step AdamW trajectory."""
    t = {}
    params = trainables(model, peft_names)
    model.zero_grad(set_to_none=True)
    logits, loss = fwd(model, ids, labels)
    loss.backward()
    t["logits"] = logits.detach().clone()
    t["loss"] = loss.detach().reshape(1).clone()
    for n, p in params:
        t["grad." + n] = p.grad.detach().clone()
    opt = torch.optim.AdamW([p for _, p in params], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    traj = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = fwd(model, ids, labels)
        traj.append(loss.item())
        loss.backward()
        opt.step()
    with torch.no_grad():
        traj.append(fwd(model, ids, labels)[1].item())
    t["traj_loss"] = torch.tensor(traj, dtype=torch.float32)
    for n, p in params:
        if final_filter is None or final_filter(n, p):
            t["final." + n] = p.detach().clone()
    return t


def adapter_model(base, cfg_cls_pair, state, use_dora, gen, quantize=False):
    cfg, cls = cfg_cls_pair
    model = cls(cfg)
    model.load_state_dict(state, strict=False)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    qtensors = {}
    if quantize:
        qtensors = quantize_linears(model)
    lc = LoraConfig(r=R, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0, bias="none",
                    use_dora=use_dora, init_lora_weights=True)
    # PEFT draws lora_A (kaiming-uniform) from torch's global generator: seed it from gen.
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
    pm = get_peft_model(model, lc)
    pm.train()
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:  # PEFT initialises B to zero; draw it so every gradient is informative
                p.copy_(0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float32))
    adapters = {"adapter." + peft_name(n): p.detach().clone() for n, p in pm.named_parameters() if p.requires_grad}
    return pm, adapters, qtensors


def flat_dequantize(packed, qs):
    """NF4 with double quantization as the format defines it (NUMERICS.md §1.7): element k uses code
    k (high nibble first) and absmax[k // blocksize], absmax = code2[q]·absmax2[b // 256] + offset."""
    p = packed.flatten()
    codes = torch.stack([p >> 4, p & 15], 1).flatten().long()
    s2 = qs.state2
    am = s2.code[qs.absmax.long()] * s2.absmax.repeat_interleave(s2.blocksize)[: qs.absmax.numel()] + qs.offset
    n = qs.shape.numel()
    return (qs.code[codes[:n]] * am.repeat_interleave(qs.blocksize)[:n]).reshape(qs.shape)


def quantize_linears(model):
    """Replace the seven target linears by bitsandbytes Linear4bit (NF4, NF4_BLOCKSIZE, double
    quantization, compute fp32). Returns the dequantized weights and the packed checkpoint tensors."""
    import bitsandbytes as bnb

    out = {}
    for name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            if child_name not in TARGETS or not isinstance(child, torch.nn.Linear):
                continue
            full = f"{name}.{child_name}" if name else child_name
            q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                  compute_dtype=torch.float32, quant_type="nf4", compress_statistics=True)
            q.weight = bnb.nn.Params4bit(child.weight.detach().clone(), requires_grad=False, quant_type="nf4",
                                         compress_statistics=True, blocksize=NF4_BLOCKSIZE)
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.detach().clone())
            q = q.to("cpu")  # quantizes
            setattr(mod, child_name, q)
            qs = q.weight.quant_state
            deq = bnb.functional.dequantize_4bit(q.weight.data, qs).float().contiguous()
            assert torch.equal(deq, flat_dequantize(q.weight.data, qs)), f"{full}: bitsandbytes' dequantization is off"
            out["base." + full + ".weight"] = deq
            out["nf4." + full + ".weight"] = q.weight.data.clone()
            for k, v in qs.as_dict(packed=True).items():
                out["nf4." + full + ".weight." + k] = v.clone()
    return out


def write(path, tensors, meta, manifest):
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    # One metadata key holding sorted JSON: safetensors writes several keys in hash order, which
    # would make the bytes (and the sha256) differ from run to run.
    save_file(tensors, path, metadata={"meta": json.dumps({k: str(v) for k, v in meta.items()}, sort_keys=True)})
    manifest.append(path)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    versions = (f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, "
                f"safetensors {safetensors.__version__}")
    try:
        import bitsandbytes as bnb
        versions += f", bitsandbytes {bnb.__version__}"
    except ImportError:
        bnb = None
    print(f"seed {SEED}; {versions}")
    written = []
    for idx, (mname, pair) in enumerate(model_configs().items()):
        cfg, cls = pair
        cfg._attn_implementation = "eager"
        seed = SEED + 1000 * idx
        gen = torch.Generator().manual_seed(seed)
        print(f"{mname}: seed {seed}")
        d = os.path.join(OUT, mname)
        os.makedirs(d, exist_ok=True)
        model = cls(cfg)
        randomize(model, gen)
        if cfg.tie_word_embeddings:
            model.tie_weights()
        model.train()  # dropout is 0 everywhere; train mode as in fine-tuning
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if cfg.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        meta = {"generator": GEN, "seed": seed, "versions": versions, "B": B, "T": T, "r": R, "alpha": ALPHA,
                "lr": LR, "weight_decay": WD, "betas": BETAS, "eps": EPS, "steps": STEPS}
        # config.json as transformers writes it (v5 spelling: rope_parameters, dtype)
        cfg.save_pretrained(d)
        written.append(os.path.join(d, "config.json"))
        write(os.path.join(d, "model.safetensors"), {k: v.to(torch.bfloat16) for k, v in state.items()},
              {"format": "pt"}, written)
        ids, labels, targets = make_inputs(cfg.vocab_size, gen)
        write(os.path.join(d, "inputs.safetensors"), {"input_ids": ids, "labels": labels, "targets": targets},
              meta, written)

        # full fine-tuning
        def keep(n, p):
            return p.dim() == 1 or n in FULL_FINAL_SUBSET
        t = grads_and_traj(model, ids, labels, peft_names=False, final_filter=keep)
        write(os.path.join(d, "full.safetensors"), t, dict(meta, mode="full"), written)
        print(f"  full  loss {t['loss'].item():.6f} traj {t['traj_loss'].tolist()}")

        variants = [("lora", False, False), ("dora", True, False)]
        if mname == "llama" and bnb is not None:
            variants += [("qlora", False, True), ("qdora", True, True)]
        for vname, use_dora, quant in variants:
            vgen = torch.Generator().manual_seed(seed + 17 + len(vname) + 7 * use_dora + 3 * quant)
            pm, adapters, qt = adapter_model(model, pair, state, use_dora, vgen, quantize=quant)
            t = dict(adapters)
            if vname == "qlora":
                qbase = qt
                t.update(qt)
            elif quant:  # qdora: the same deterministic quantization; its tensors live in qlora
                assert all(torch.equal(qt[k], qbase[k]) for k in qt)
            t.update(grads_and_traj(pm, ids, labels, peft_names=True))
            write(os.path.join(d, f"{vname}.safetensors"), t, dict(meta, mode=vname, use_dora=use_dora,
                                                                    nf4=quant), written)
            print(f"  {vname:5s} loss {t['loss'].item():.6f} traj {t['traj_loss'].tolist()}")

    total = 0
    lines = []
    for p in written:
        total += os.path.getsize(p)
        lines.append(f"{p} generator={GEN} seed={SEED} {versions} sha256={sha256(p)}")
    with open("tests/golden/data/MANIFEST", "a") as f:
        for ln in lines:
            f.write(ln + "\n")
    print(f"{len(written)} files, {total} bytes")


if __name__ == "__main__":
    sys.exit(main())
