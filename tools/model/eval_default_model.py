#!/usr/bin/env python3
"""Evaluation of the kvcomp default model: held-out perplexity and line-retrieval exact match.

Used by train_default_model.py after export (on the weights re-read from model.safetensors), and
standalone on an exported directory:

    python3 tools/model/eval_default_model.py --model tools/model/default [--n 200] [--device cuda]

Perplexity: the held-out text is cut into windows of `window` bytes; each is scored as
<bos> + window, every byte predicted (the first from <bos> alone); ppl = exp(mean NLL per byte).
Line retrieval: exact match of greedy decoding of the 7 answer bytes "<DDDDD>" after each prompt
(tasks.eval_set), in fp32. Computed in one teacher-forced forward per example (greedy reproduces the
answer iff every answer token is the argmax given the gold prefix); failures are decoded greedily
for the record. Batches are right-padded: with causal attention, padding after a row's last token
cannot change that row's logits.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402
from llama_model import HAS_SDPA, load_model  # noqa: E402


def _batch_rows(model, n_tokens, device):
    """Rows per forward: bounded by activations, and by the score matrix when attention is manual."""
    rows = max(1, 65536 // n_tokens)
    if not (HAS_SDPA and device.type == "cuda"):
        heads = model.cfg["num_attention_heads"]
        rows = min(rows, max(1, (1 << 29) // (heads * n_tokens * n_tokens * 4)))
    return rows


@torch.no_grad()
def greedy_generate(model, prompts, n_new, device):
    """prompts: list of id lists (each starting with <bos>) -> list of n_new generated ids each."""
    outs = []
    max_len = max(len(p) for p in prompts) + n_new
    step = _batch_rows(model, max_len, device)
    for s in range(0, len(prompts), step):
        chunk = prompts[s:s + step]
        lens = torch.tensor([len(p) for p in chunk], device=device)
        width = int(lens.max()) + n_new
        buf = torch.full((len(chunk), width), tasks.PAD_ID, dtype=torch.long, device=device)
        for i, p in enumerate(chunk):
            buf[i, :len(p)] = torch.tensor(p, device=device)
        rows = torch.arange(len(chunk), device=device)
        for k in range(n_new):
            cur = int(lens.max()) + k
            logits = model(buf[:, :cur])
            nxt = logits[rows, lens - 1 + k].argmax(-1)
            buf[rows, lens + k] = nxt
        for i in range(len(chunk)):
            outs.append(buf[i, int(lens[i]):int(lens[i]) + n_new].tolist())
    return outs


@torch.no_grad()
def teacher_forced_hits(model, prompts, answers, device):
    """For each (prompt, answer) pair: is every answer token the argmax given the gold prefix?

    This is exactly "greedy decoding reproduces the answer": if all argmaxes along the gold path
    match, greedy decoding walks that path; at the first mismatch greedy emits a different token.
    One forward per example instead of one per generated token.
    """
    hits = []
    seqs = [p + a for p, a in zip(prompts, answers)]
    step = _batch_rows(model, max(len(s) for s in seqs), device)
    for s in range(0, len(seqs), step):
        chunk = seqs[s:s + step]
        width = max(len(q) for q in chunk)
        buf = torch.full((len(chunk), width), tasks.PAD_ID, dtype=torch.long)
        for i, q in enumerate(chunk):
            buf[i, :len(q)] = torch.tensor(q)
        pred = model(buf.to(device)).argmax(-1).cpu()
        for i in range(len(chunk)):
            p_len, a = len(prompts[s + i]), answers[s + i]
            hits.append(pred[i, p_len - 1:p_len - 1 + len(a)].tolist() == a)
    return hits


def line_retrieval(model, lengths, n, device, seed=tasks.EVAL_SEED, n_show=3):
    """{str(length): {exact_match, n, mean_lines, em_by_third, failures}}: greedy exact match of "<DDDDD>".

    Scored with teacher_forced_hits (same result as greedy decoding); the real greedy output is
    decoded for the first n_show failures so eval.json shows what the model says instead.
    """
    res = {}
    for length in lengths:
        t0 = time.time()
        exs = tasks.eval_set(length, n, seed)
        prompts = [[tasks.BOS_ID] + tasks.encode(e["prompt"]) for e in exs]
        hits = teacher_forced_hits(model, prompts, [tasks.encode(e["answer"]) for e in exs], device)
        failed = [i for i, h in enumerate(hits) if not h][:n_show]
        shown = greedy_generate(model, [prompts[i] for i in failed], tasks.ANSWER_LEN, device) if failed else []
        thirds = [[], [], []]
        for h, e in zip(hits, exs):
            thirds[min(2, 3 * e["line_index"] // e["n_lines"])].append(h)
        res[str(length)] = {
            "exact_match": sum(hits) / len(hits),
            "n": len(hits),
            "mean_lines": sum(e["n_lines"] for e in exs) / len(exs),
            "em_by_third": [round(sum(t) / len(t), 4) if t else None for t in thirds],
            "failures": [{"example": i, "answer": exs[i]["answer"], "greedy": tasks.decode(g)}
                         for i, g in zip(failed, shown)],
            "seconds": round(time.time() - t0, 2),
        }
    return res


@torch.no_grad()
def heldout_perplexity(model, text_bytes, device, window=2048, autocast=None):
    """Mean NLL per byte over <bos>+window chunks of text_bytes; returns dict with ppl and bits/byte."""
    ids = list(text_bytes)
    chunks = [ids[i:i + window] for i in range(0, len(ids), window)]
    total, count = 0.0, 0
    step = _batch_rows(model, window + 1, device)
    for s in range(0, len(chunks), step):
        batch = chunks[s:s + step]
        width = max(len(c) for c in batch) + 1
        x = torch.full((len(batch), width), tasks.PAD_ID, dtype=torch.long)
        y = torch.full((len(batch), width), -100, dtype=torch.long)
        for i, c in enumerate(batch):
            x[i, 0] = tasks.BOS_ID
            x[i, 1:len(c) + 1] = torch.tensor(c)
            y[i, :len(c)] = torch.tensor(c)
        x, y = x.to(device), y.to(device)
        if autocast is not None:
            with autocast():
                logits = model(x)
        else:
            logits = model(x)
        nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1),
                              ignore_index=-100, reduction="sum")
        total += float(nll)
        count += int((y != -100).sum())
    mean = total / max(count, 1)
    return {"nll_per_byte": mean, "ppl_per_byte": math.exp(mean), "bits_per_byte": mean / math.log(2),
            "n_bytes": count, "window": window}


def hf_crosscheck(model_dir, model, device, text_bytes, n_tokens=512):
    """If transformers is importable: load model_dir with LlamaForCausalLM and compare fp32 logits."""
    # A local directory needs no hub; offline mode keeps a host without network from waiting on it.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        return {"available": False}
    except Exception as e:  # a broken install must not end the run
        return {"available": False, "import_error": repr(e)[:300]}
    try:
        from transformers import LlamaForCausalLM as HFLlama
        hf = HFLlama.from_pretrained(model_dir, dtype=torch.float32).float().to(device).eval()
        ids = torch.tensor([[tasks.BOS_ID] + list(text_bytes[:n_tokens - 1])], device=device)
        with torch.no_grad():
            a = hf(input_ids=ids).logits.float()
            b = model(ids).float()
        diff = float((a - b).abs().max())
        return {"available": True, "transformers_version": transformers.__version__,
                "n_tokens": int(ids.shape[1]), "max_abs_logit_diff": diff,
                "max_abs_logit": float(b.abs().max()),
                "argmax_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean())}
    except Exception as e:  # report, never kill the run: this check is optional
        return {"available": True, "error": repr(e)[:600]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="directory with config.json and model.safetensors")
    ap.add_argument("--heldout", help="held-out text (default MODEL/heldout.txt)")
    ap.add_argument("--lengths", default="256,512,1024,2048")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--hf-check", action="store_true", help="compare with transformers if importable")
    args = ap.parse_args()
    device = torch.device(args.device)
    model = load_model(args.model, device)
    heldout = open(args.heldout or os.path.join(args.model, "heldout.txt"), "rb").read()
    out = {"heldout": heldout_perplexity(model, heldout, device),
           "line_retrieval": line_retrieval(model, [int(x) for x in args.lengths.split(",")], args.n, device)}
    if args.hf_check:
        out["hf_crosscheck"] = hf_crosscheck(args.model, model, device, heldout)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
