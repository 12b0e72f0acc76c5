#!/usr/bin/env python3
"""Builds the tokenizer fixtures in tests/engine/data/tokenizer/ from llama.cpp (through
llama-cpp-python), so tests/engine/test_tokenizer.c can check weft's tokenizer id for id
without llama.cpp at test time.

    python3 scripts/make_tokenizer_fixtures.py [--model SmolLM2.gguf] [--out DIR]

Outputs
  spm_tiny.gguf     a small SentencePiece ("llama") vocabulary: byte tokens, control and
                    user-defined tokens, and ~400 pieces with scores from a toy BPE training
  spm_phi3.gguf     the same, named "Phi-3 ...": llama.cpp's Phi-3 rule (special tokens
                    swallow the whitespace after them) applies
  <name>.txt        one fixture per (vocabulary, pre-tokenizer): smollm (the default model
                    as shipped), llama3 / qwen2 / gpt2 / default / falcon / chatglm-bpe /
                    gpt-4o / tekken (the same vocabulary with
                    tokenizer.ggml.pre rewritten; the C test applies the same override), falcon,
                    chatglm-bpe, spm.

Fixture line format (all text hex-encoded, "-" for empty):
  V <n_vocab>
  S <bos> <eos> <add_bos 0/1> <add_eos 0/1>
  G <comma-separated EOG ids>
  P <fnv64 of all pieces, render_special=1> <fnv64, render_special=0>
  T <add_special> <parse_special> <text hex> <ids, comma-separated> <detokenized hex> <streamed hex>
The piece checksum is FNV-1a 64 over, for each id, its 4-byte little-endian length then
its bytes. Detokenized text is llama_detokenize(ids, remove_special=0, unparse_special=0).
Streamed text is what a streaming detokenizer must print: the concatenated pieces
(llama_token_to_piece, special=0) decoded by Python with errors="replace". "=" stands for
"same as the previous field" (detokenized == text, streamed == detokenized).
"""
import argparse
import ctypes
import os
import sys
import tempfile

import gguf
import llama_cpp
import numpy as np
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_MODEL = "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf"

# ---------------------------------------------------------------------------------------
# corpus

CORPUS = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "a", "A", "Hello", "hello world",
    "Hello, world!", "Hello world 12345  x\n\n", "The quick brown fox jumps over the lazy dog.",
    "I'm here, you're there, we've been, they'll go, he'd say, it's fine, don't.",
    "I'M LOUD, YOU'RE LOUD, WE'VE, THEY'LL, HE'D, IT'S, DON'T",
    "'s 't 're 've 'm 'll 'd", "''''", "'", "rock 'n' roll", "O'Neil's dog",
    "trailing spaces   ", "   leading spaces", "multiple   spaces   inside", "tab\tseparated\tvalues",
    "mixed \t \n whitespace", "line1\nline2\nline3", "windows\r\nline\r\nendings\r\n",
    "\n\n\nthree newlines", "para one.\n\npara two.", "    four-space indent", "\t\ttwo tabs",
    " \t\n\r\x0b\x0c", "end with newline\n", "end with spaces and newline  \n",
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567890", "3.14159265358979",
    "1,000,000", "-273.15", "1e-10", "0x1F2E3D", "2024-01-15T10:30:00Z", "v1.2.3",
    "98765432109876543210987654321098765432109876543210",
    "Phone: +1 (555) 123-4567", "¹²³ ½ ¾ ⅓ Ⅻ ① ٣٤٥ ४५६ ๓",
    "café naïve résumé façade", "Ελληνικά κείμενο", "Привет, мир! Как дела?",
    "你好，世界！", "日本語のテキストです。", "한국어 텍스트", "中文 English 混合 text",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "हिन्दी में लिखा गया वाक्य।",
    "ภาษาไทย", "Tiếng Việt có dấu", "e\u0301 a\u0308 o\u0302 combining", "Z\u0351\u036b\u0343a\u0310lgo",
    "\u200b zero width \u200c\u200d", "\u00a0nbsp\u00a0", "\u3000ideographic space\u3000",
    "\u2028line sep\u2029para sep", "\u0085next line", "soft\u00adhyphen",
    "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇫🇷🇯🇵", "❤️", "I ❤️ NY 🗽",
    "emoji in text 🚀 rocket", "👩🏿‍💻 coding", "🤷‍♂️", "★☆✓✗→←↑↓", "©®™ ±×÷ ∑∫∂√∞",
    "€100 £50 ¥1000 $20", "«quotes» „German“ “curly” ‘single’", "em—dash en–dash", "…ellipsis…",
    "<html><body>Hi</body></html>", "a+b=c; x<y && y>z || !w", "foo_bar-baz.qux",
    "user@example.com", "https://example.com/path?query=1&x=y#frag", "C:\\Users\\test\\file.txt",
    "#include <stdio.h>\nint main(void) {\n    printf(\"hi\\n\");\n    return 0;\n}\n",
    "def f(x):\n    if x > 0:\n        return x * 2\n    return -x\n",
    "class A:\n\tdef __init__(self):\n\t\tself.x = [1, 2, 3]\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * c; }",
    "```python\nprint('hello')\n```", "SELECT * FROM users WHERE id = 42;",
    "{\"key\": \"value\", \"num\": 123, \"arr\": [true, null]}", "x = y ** 2 // 3 % 4",
    "$$E = mc^2$$", "`backticks` and ~tilde~ and ^caret^ and |pipe|",
    "!!!???...,,,;;;:::", "((()))[[[]]]{{{}}}", "@#$%^&*", "---===+++", "...", "a.b.c.d",
    "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "text<|endoftext|>more", "<|im_end|><|im_end|>", "<|im_start|", "<|im_start|><|im_start|>",
    "prefix <|im_start|> suffix", "<reponame>repo<file_sep>file", "<jupyter_code>x=1<jupyter_output>",
    "<s> and </s> and <unk>", "<tool> call </tool>", "[INST] hi [/INST]",
    "<|user|>\n  Hi there <|end|>\n<|assistant|>\n", " <|endoftext|>  x </s> \t y <unk>  z",
    # invalid UTF-8 (bytes, not text)
    b"\xff", b"\xfe\xff", b"abc\x80def", b"\xc3", b"\xc3\x28", b"\xe2\x82", b"\xe2\x82\x28",
    b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\x80", b"ok\xe4\xbd\xa0\xe5", b"\x80\x81\x82",
    b"caf\xe9 latin-1", b"\xf0\x9f\x98\x80\xf0\x9f",
    "A" * 300, "ab" * 200, " " * 100, "\n" * 50, "=" * 80, "9" * 120, "😀" * 20,
    "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "CamelCaseIdentifierName", "snake_case_identifier_name", "SCREAMING_SNAKE_CASE",
    "Mr. Smith went to Washington D.C. on Jan. 5th.", "It's 5 o'clock.", "He said: \"Yes!\"",
    "A sentence ending with a question?", "Wait... what?!", "(parenthetical) [bracketed] {braced}",
    "tabs\tand\nnewlines\r\nmixed", "   \n   \n   ", "x\n\n\n\ny", "end\r", "\r\r\n\n",
    "The year 1999 and 2000 and 20001.", "a1b2c3d4", "1a2b3c", "v2", "H2O CO2 C6H12O6",
    "Ünïcödé Çhåräçtêrs", "İstanbul ıi", "ß ẞ ﬁ ﬂ", "Ǆ ǅ ǆ", "ＦＵＬＬＷＩＤＴＨ １２３",
    "ｶﾀｶﾅ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "𠀀𠀁 rare CJK", "\U0001F9D1\u200D\U0001F52C",
    "\x00", "a\x00b", "\x01\x02\x03", "\x7f", "bell\x07",
    "The Transformer architecture relies on self-attention mechanisms to process sequences.",
    "In 2023, large language models (LLMs) such as GPT-4 achieved remarkable results.",
    "Once upon a time, in a land far, far away, there lived a king who had three daughters.",
    "HelloWorld HTTPServer iPhone McDonald's ÀBCd ABCé éABC AÉb Ωmega ÅNGSTRÖM straße",
    "a/b//c\n/ //\r\n path/to/file.txt",
]


def random_strings(n=120, seed=1234):
    """Deterministic random mixes of the character classes the pre-tokenizers distinguish
    (letters of several scripts, digits, punctuation, symbols, whitespace kinds, marks,
    emoji, apostrophe contractions, special-token text) plus raw invalid bytes."""
    import random
    rng = random.Random(seed)
    atoms = ["a", "Z", "hello", "World", "x", "'s", "'T", "'re", "'LL", "'", " ", "  ", "   ", "\t", "\n",
             "\r\n", "\n\n", "\u00a0", "\u3000", "\u2003", "0", "7", "42", "1234567", "\u0663\u0664",
             "\u00bd", ".", ",", "!", "?", "...", "-", "_", "(", ")", "[", "]", "{", "}", "<", ">", "=",
             "+", "$", "^", "`", "~", "|", "#", "@", "&", "*", "/", "\\", "\"", "é", "ß", "ñ", "Ж", "ж",
             "中", "文", "日本", "한", "ع", "ב", "क", "ि", "\u0301", "\u200d", "\ufe0f", "😀", "👍🏽",
             "🇫🇷", "€", "™", "→", "∑", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>",
             "<tool>", "im_", "|>", "<|"]
    out = []
    for _ in range(n):
        k = rng.randint(1, 24)
        parts = [rng.choice(atoms) for _ in range(k)]
        b = "".join(parts).encode("utf-8")
        if rng.random() < 0.15:  # splice in an invalid byte
            pos = rng.randint(0, len(b))
            b = b[:pos] + bytes([rng.choice([0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFF])]) + b[pos:]
        out.append(b)
    return out


def check_corpus():
    assert len(CORPUS) >= 150, len(CORPUS)


def to_bytes(s):
    return s if isinstance(s, bytes) else s.encode("utf-8")


# ---------------------------------------------------------------------------------------
# reference helpers

def fnv_pieces(vocab, n_vocab, special):
    h = 0xcbf29ce484222325
    buf = ctypes.create_string_buffer(4096)
    for i in range(n_vocab):
        n = llama_cpp.llama_token_to_piece(vocab, i, buf, 4096, 0, special)
        assert n >= 0
        data = n.to_bytes(4, "little") + buf.raw[:n]
        for b in data:
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def detok(vocab, ids):
    if not ids:
        return b""
    arr = (llama_cpp.llama_token * len(ids))(*ids)
    cap = 64 + 64 * len(ids)
    buf = ctypes.create_string_buffer(cap)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, cap, False, False)
    assert 0 <= n <= cap, n
    return buf.raw[:n]


def pieces(vocab, ids):
    buf = ctypes.create_string_buffer(4096)
    out = b""
    for i in ids:
        n = llama_cpp.llama_token_to_piece(vocab, i, buf, 4096, 0, False)
        assert n >= 0
        out += buf.raw[:n]
    return out.decode("utf-8", errors="replace").encode("utf-8")


def hx(b):
    return b.hex() if b else "-"


def write_fixture(model_path, out_path, title):
    llm = Llama(model_path=model_path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    lines = ["# %s -- generated by scripts/make_tokenizer_fixtures.py (llama-cpp-python %s)"
             % (title, llama_cpp.__version__)]
    lines.append("V %d" % n_vocab)
    lines.append("S %d %d %d %d" % (llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab),
                                    int(llama_cpp.llama_vocab_get_add_bos(vocab)),
                                    int(llama_cpp.llama_vocab_get_add_eos(vocab))))
    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    lines.append("G " + ",".join(map(str, eog)))
    lines.append("P %s %s" % (fnv_pieces(vocab, n_vocab, True), fnv_pieces(vocab, n_vocab, False)))
    n_cases = 0
    for k, s in enumerate(CORPUS):
        b = to_bytes(s)
        special_like = b"<" in b or b"[" in b
        # parse_special only matters for text that can hold a special token; elsewhere the
        # two flags alternate so both BOS/EOS paths stay covered
        combos = [(0, 0), (1, 0), (0, 1), (1, 1)] if special_like else [[(1, 0)], [(0, 1)]][k % 2]
        if len(b) > 1000:  # the long document: with and without special-token parsing
            combos = [(1, 0), (1, 1)]
        for add_special, parse_special in combos:
            ids = llm.tokenize(b, add_bos=bool(add_special), special=bool(parse_special))
            dt, st = detok(vocab, ids), pieces(vocab, ids)
            lines.append("T %d %d %s %s %s %s" % (add_special, parse_special, hx(b),
                                                  ",".join(map(str, ids)) if ids else "-",
                                                  "=" if dt == b else hx(dt), "=" if st == dt else hx(st)))
            n_cases += 1
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%s: %d cases, %d EOG ids" % (out_path, n_cases, len(eog)))
    del llm


# ---------------------------------------------------------------------------------------
# BPE variants: the default model's vocabulary with another tokenizer.ggml.pre

def copy_with_pre(src, dst, pre):
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch="llama")
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        if not (k.startswith("tokenizer.") or k.startswith("llama.")):
            continue
        if k == "tokenizer.ggml.pre":
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), vt, sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), vt)
    w.add_key_value("tokenizer.ggml.pre", pre, gguf.GGUFValueType.STRING)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------------------------------
# a tiny SentencePiece vocabulary

SPM_TRAIN = """The quick brown fox jumps over the lazy dog. The dog sleeps in the sun.
Hello world! Hello there, how are you doing today? I'm fine, thank you.
Language models read text as tokens; tokenizers split words into pieces.
In the beginning there was the word, and the word was with the tokenizer.
Numbers like 1234 and 2024 appear often, as do dates: 2024-01-15.
def main(): print("hello") return 0
the the the and and and of of to to in in is is it it that that for for on on with with
"""


def toy_spm_pieces(n_merges=300):
    """A deterministic toy BPE over the training text with spaces as U+2581; every merge
    result becomes a piece whose score is -rank (earlier merges score higher)."""
    words = {}
    for w in SPM_TRAIN.replace("\n", " ").split(" "):
        if w:
            key = tuple("\u2581" + w)
            words[key] = words.get(key, 0) + 1
    pieces = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merged = best[0] + best[1]
        pieces.append(merged)
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    return pieces


def write_spm_gguf(path, name="weft-spm-tiny", extra_control=()):
    toks, scores, types = [], [], []

    def add(t, s, ty):
        toks.append(t)
        scores.append(s)
        types.append(ty)

    add("<unk>", 0.0, 2)
    add("<s>", 0.0, 3)
    add("</s>", 0.0, 3)
    for b in range(256):
        add("<0x%02X>" % b, 0.0, 6)
    add("<|im_start|>", 0.0, 3)
    add("<|im_end|>", 0.0, 3)
    add("<tool>", 0.0, 4)
    add("</tool>", 0.0, 4)
    add("<unused0>", 0.0, 3)
    for t in extra_control:
        add(t, 0.0, 3)
    chars = sorted(set(SPM_TRAIN.replace("\n", "").replace(" ", "\u2581")) |
                   set("\u2581abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()") |
                   set("你好世界中文éàü😀"))
    for i, c in enumerate(chars):
        add(c, -1000.0 - i, 1)
    for r, p in enumerate(toy_spm_pieces()):
        if p not in toks:
            add(p, -float(r), 1)
    for extra, sc in (("\u2581\u2581", -5.0), ("\u2581\u2581\u2581\u2581", -4.0), ("\u2581\u2581\u2581\u2581\u2581\u2581\u2581\u2581", -3.5),
                      ("你好", -2.0), ("世界", -2.5), ("\u2581你", -3.0)):
        if extra not in toks:
            add(extra, sc, 1)
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name(name)
    w.add_context_length(128)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(8)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(toks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "engine", "data", "tokenizer"))
    ap.add_argument("--gemma", default="",
                    help="write only gemma3.txt, from this Gemma 3 GGUF (SentencePiece, 262k)")
    args = ap.parse_args()
    check_corpus()
    # a long document: every text entry joined (about 4 KB), tokenized in one call
    CORPUS.append("\n".join(x for x in CORPUS if isinstance(x, str)))
    CORPUS.extend(random_strings())
    os.makedirs(args.out, exist_ok=True)
    if args.gemma:
        write_fixture(args.gemma, os.path.join(args.out, "gemma3.txt"), "Gemma 3 270M vocabulary")
        return
    write_fixture(args.model, os.path.join(args.out, "smollm.txt"), "SmolLM2 vocabulary, pre=smollm")
    with tempfile.TemporaryDirectory() as tmp:
        for pre in ("llama-bpe", "qwen2", "gpt-2", "default", "falcon", "chatglm-bpe", "gpt-4o", "tekken"):
            p = os.path.join(tmp, "v.gguf")
            copy_with_pre(args.model, p, pre)
            name = {"llama-bpe": "llama3", "gpt-2": "gpt2"}.get(pre, pre)
            write_fixture(p, os.path.join(args.out, name + ".txt"), "SmolLM2 vocabulary, pre=" + pre)
    spm = os.path.join(args.out, "spm_tiny.gguf")
    n = write_spm_gguf(spm)
    print("%s: %d tokens" % (spm, n))
    write_fixture(spm, os.path.join(args.out, "spm.txt"), "spm_tiny.gguf (SentencePiece)")
    # the same vocabulary named like Phi-3: llama.cpp then strips whitespace after special tokens
    phi3 = os.path.join(args.out, "spm_phi3.gguf")
    write_spm_gguf(phi3, name="Phi-3 tiny (weft test)",
                   extra_control=("<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>"))
    write_fixture(phi3, os.path.join(args.out, "spm_phi3.txt"), "spm_phi3.gguf (SentencePiece, Phi-3 rules)")


if __name__ == "__main__":
    sys.exit(main())
