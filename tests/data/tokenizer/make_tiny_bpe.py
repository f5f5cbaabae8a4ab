#!/usr/bin/env python3
"""Writes tiny_bpe.json: a small byte-level BPE tokenizer in Hugging Face tokenizer.json format,
Llama 3 style (Split regex + ByteLevel, ignore_merges, TemplateProcessing with <|begin_of_text|>).

Vocab: the 256 byte symbols of GPT-2's alphabet (id = byte value), then one token per merge. Merges
are learned from the short corpus below without pre-tokenization, so many of them cross the
boundaries the pre-tokenizer regex draws (digits, spaces, newlines, punctuation): a wrong split
then shows up as different ids. test_tokenizer.cpp derives GPT-2 and Qwen2 variants from this file.
Usage: python3 tests/data/tokenizer/make_tiny_bpe.py  (then node make_golden.js, see there)
"""
import collections
import json
import os

CORPUS = """The quick brown fox jumps over the lazy dog. The dog didn't care; it's a lazy dog.
I'm sure they'll say we're fine, and you've been told: THEY'LL SAY IT'S FINE.
In 2024 the price rose from 1234.56 to 7890 (about 12%) while 3 + 4 = 7 and 100000 > 99999.
def encode(text):\n    return [ord(c) for c in text]  # 4 spaces\n\n\tindented with a tab\r\n
Ça va? Très bien, merci. Naïve café, façade, jalapeño, Straße, Ærø, œuvre.
Привет, как дела? Всё хорошо. Γειά σου κόσμε. 你好，世界！今天天气很好。 こんにちは、世界。
안녕하세요 세계. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया। ١٢٣ ٤٥٦ ² ³ ½ Ⅻ
Emoji: 😀 😃 👍🏽 👨‍👩‍👧 🇫🇷 ✨💡 — dashes – and “quotes” ‘single’ … ellipsis.
   leading spaces, trailing spaces   \n\n\n multiple newlines \r\n\r\n and tabs\t\t.
"""

def byte_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

def main():
    b2u = byte_alphabet()
    to_bl = lambda s: "".join(b2u[b] for b in s.encode("utf-8"))
    words = collections.Counter()
    for start in range(0, len(CORPUS), 3):  # overlapping 8-char windows
        words[tuple(to_bl(CORPUS[start:start + 8]))] += 1
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    for _ in range(300):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if a + b in vocab:
            break
        merges.append([a, b])
        vocab[a + b] = len(vocab)
        merged = collections.Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    n = len(vocab)
    def added(i, content, special=True, lstrip=False, rstrip=False):
        return {"id": i, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
                "normalized": not special, "special": special}
    llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(n, "<|begin_of_text|>"), added(n + 1, "<|end_of_text|>"), added(n + 2, "<|eot_id|>"),
                         added(n + 3, "<tool>", special=False), added(n + 4, "[MASK]", lstrip=True, rstrip=True)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": llama3}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [n], "tokens": ["<|begin_of_text|>"]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_bpe.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, separators=(",", ":"))
    print(f"{path}: {len(vocab)} vocab, {len(merges)} merges")

if __name__ == "__main__":
    main()
