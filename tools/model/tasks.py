#!/usr/bin/env python3
"""Byte tokenizer and synthetic long-context tasks of the kvcomp default model (pure Python, no torch).

Tokenizer: ids 0..255 are bytes, 256 <bos>, 257 <eos>, 258 <pad>; a sequence starts with <bos>.

Line retrieval, LongEval style. A record of lines

    line 512: REGISTER_CONTENT is <38012>
    line 77: REGISTER_CONTENT is <11234>
    ...

then the question `What is the REGISTER_CONTENT in line 77?` + "\\n" and the answer `<11234>`.
Line numbers are distinct, drawn uniformly from [1, 999] (not sequential: the model must match the
number itself, not count lines); values are uniform 5-digit numbers [10000, 99999]; the asked line is
uniform over the record. An eval example of context length N holds as many lines as fit so that
<bos> + record + question + answer (7 bytes) <= N tokens; exact match = the 7 greedy tokens after
the prompt equal the answer bytes.

Training rows (line_retrieval_row) put a record of random length first and then fill the row with
question/answer pairs ("...?\\n<DDDDD>\\n" repeated), so one row teaches many lookups at many
distances. Their loss mask drops the random digits (line numbers, values, asked line number):
those are unpredictable noise; the template bytes and the answers are kept.

Everything is deterministic from the seed (random.Random, Mersenne Twister, stable across Python 3
versions). `python3 tasks.py --dump FILE` writes the eval set as JSON lines for other tools.
"""
import argparse
import json
import random

BOS_ID, EOS_ID, PAD_ID = 256, 257, 258
TOKENIZER_JSON = {"type": "byte", "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}

KEY_MIN, KEY_MAX = 1, 999
VALUE_MIN, VALUE_MAX = 10000, 99999
ANSWER_LEN = 7  # "<DDDDD>"
EVAL_LENGTHS = (256, 512, 1024, 2048)
EVAL_SEED = 1234


def encode(text):
    """Bytes of `text` (ASCII/UTF-8) as token ids, no <bos>."""
    return list(text.encode("utf-8"))


def decode(ids):
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def record_line(key, value):
    return "line %d: REGISTER_CONTENT is <%d>\n" % (key, value)


def question(key):
    return "What is the REGISTER_CONTENT in line %d?\n" % key


def answer(value):
    return "<%d>" % value


def _draw_record(rng, budget_bytes, min_lines=2):
    """Distinct keys with values, as many lines as fit in budget_bytes (at least min_lines)."""
    keys, values, used, seen = [], [], 0, set()
    while len(seen) < KEY_MAX - KEY_MIN + 1:
        key = rng.randint(KEY_MIN, KEY_MAX)
        if key in seen:
            continue
        seen.add(key)
        value = rng.randint(VALUE_MIN, VALUE_MAX)
        n = len(record_line(key, value))
        if used + n > budget_bytes and len(keys) >= min_lines:
            break
        keys.append(key)
        values.append(value)
        used += n
    return keys, values


def line_retrieval_example(rng, context_len):
    """One eval example: dict(prompt, answer, key, n_lines, line_index, context_len).

    len(<bos>) + len(prompt) + ANSWER_LEN <= context_len, with as many record lines as fit.
    """
    # The longest question ("...line 999?\n") bounds the room left for the record.
    fixed = 1 + len(question(KEY_MAX)) + ANSWER_LEN
    keys, values = _draw_record(rng, context_len - fixed)
    idx = rng.randrange(len(keys))
    prompt = "".join(record_line(k, v) for k, v in zip(keys, values)) + question(keys[idx])
    return {"prompt": prompt, "answer": answer(values[idx]), "key": keys[idx], "n_lines": len(keys),
            "line_index": idx, "context_len": context_len}


def eval_set(context_len, n, seed=EVAL_SEED):
    """The fixed evaluation set for one context length (same seed -> same examples everywhere)."""
    rng = random.Random(seed * 1000003 + context_len)
    return [line_retrieval_example(rng, context_len) for _ in range(n)]


def line_retrieval_row(rng, n_tokens, min_record=80):
    """One training row: (ids, mask, answer_digit_positions), ids of exactly n_tokens (from <bos>).

    mask[t] = 1 means "predict token t from tokens < t" is trained (mask[0] is always 0).
    answer_digit_positions: indices t of answer digits (for logging retrieval accuracy in training).
    Record length is uniform in [min_record, n_tokens - 60] bytes; Q/A pairs fill the rest.
    """
    ids, mask, ans = [BOS_ID], [0], []

    def put(text, m):
        b = text.encode("ascii")
        ids.extend(b)
        mask.extend([m] * len(b))

    hi = max(min_record, n_tokens - 60)
    keys, values = _draw_record(rng, rng.randint(min(min_record, hi), hi))
    for k, v in zip(keys, values):
        put("line ", 1), put(str(k), 0), put(": REGISTER_CONTENT is <", 1), put(str(v), 0), put(">\n", 1)
    while len(ids) < n_tokens:
        i = rng.randrange(len(keys))
        put("What is the REGISTER_CONTENT in line ", 1), put(str(keys[i]), 0), put("?\n<", 1)
        ans.extend(range(len(ids), len(ids) + 5))
        put(str(values[i]), 1), put(">\n", 1)
    return ids[:n_tokens], mask[:n_tokens], [t for t in ans if t < n_tokens]


def main():
    ap = argparse.ArgumentParser(description="dump the line-retrieval eval set as JSON lines")
    ap.add_argument("--dump", required=True, help="output .jsonl path")
    ap.add_argument("--lengths", default=",".join(map(str, EVAL_LENGTHS)))
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=EVAL_SEED)
    args = ap.parse_args()
    with open(args.dump, "w") as f:
        for length in (int(x) for x in args.lengths.split(",")):
            for ex in eval_set(length, args.n, args.seed):
                f.write(json.dumps(ex) + "\n")


if __name__ == "__main__":
    main()
