#!/usr/bin/env python3
"""Train, export and evaluate the kvcomp default model (a small byte-level Llama) in one time-boxed run.

    python3 tools/model/train_default_model.py --corpus tools/model/data/kjv_train.txt \\
        --out $OUT/default_model --minutes 6

Training stops when --minutes of training time are spent (or --max-steps), then the weights are
written as fp16 safetensors in Hugging Face layout, re-read from that file, and evaluated (held-out
perplexity, line-retrieval exact match by context length). Outputs in --out: config.json,
model.safetensors, kvcomp_tokenizer.json, generation_config.json, heldout.txt, train_log.csv,
eval.json, model_card.md.

Data: each step is tokens_per_step byte tokens as B rows of T+1 tokens; a fraction --ret-frac of the
rows are line-retrieval rows (tasks.line_retrieval_row), the rest are random windows of the corpus
after <bos>. T follows a curriculum over the time budget (--curriculum, default 512 then 1024 then
2048 tokens) with B*T constant: short rows make early steps cheap while the lookup circuit forms.
Optimiser: AdamW (betas 0.9/0.95, weight decay on matrices only), linear warmup then cosine decay
driven by the fraction of the time budget spent, grad-norm clip 1.0, bf16 autocast on CUDA.
"""
import argparse
import csv
import datetime
import json
import math
import os
import random
import shutil
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402
import eval_default_model as ev  # noqa: E402
from llama_model import (LlamaForCausalLM, export_state, hf_config, load_model, num_params,  # noqa: E402
                         save_safetensors)

DEFAULT_ARCH = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=6,
                    num_key_value_heads=2, head_dim=64)
TINY_ARCH = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=64)


def log(msg):
    print(msg, flush=True)


def parse_curriculum(text):
    """"512@0,1024@0.1,2048@0.3" -> [(0.0, 512), (0.1, 1024), (0.3, 2048)] sorted by start fraction."""
    out = []
    for part in text.split(","):
        t, start = part.split("@")
        out.append((float(start), int(t)))
    out.sort()
    if out[0][0] != 0.0:
        raise ValueError("curriculum must start at fraction 0")
    return out


class Batcher:
    """Builds training batches on the CPU, deterministic from the seed."""

    def __init__(self, corpus, ret_frac, seed):
        self.corpus = corpus  # np.uint8 array
        self.ret_frac = ret_frac
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)

    def batch(self, rows, t):
        n_ret = int(round(rows * self.ret_frac))
        ids = np.empty((rows, t + 1), dtype=np.int64)
        w = np.ones((rows, t + 1), dtype=np.float32)
        ans = np.zeros((rows, t + 1), dtype=bool)
        for r in range(n_ret):
            row, mask, pos = tasks.line_retrieval_row(self.rng, t + 1)
            ids[r], w[r] = row, mask
            ans[r, pos] = True
        offs = self.np_rng.integers(0, len(self.corpus) - t, size=rows - n_ret)
        for j, off in enumerate(offs):
            ids[n_ret + j, 0] = tasks.BOS_ID
            ids[n_ret + j, 1:] = self.corpus[off:off + t]
        w[n_ret:, 0] = 0.0
        is_lm = np.zeros((rows,), dtype=bool)
        is_lm[n_ret:] = True
        return ids, w, ans, is_lm


def to_device(arr, device):
    """Pinned host copy on CUDA: a copy from pageable memory would wait for the GPU to drain,
    so the next batch could not be built while the current step runs."""
    t = torch.from_numpy(arr)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t


def lr_at(step, frac, args):
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    floor = args.lr * args.min_lr_frac
    return floor + (args.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac)))


def make_optimizer(model, args, device):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if device.type == "cuda":
        try:
            return torch.optim.AdamW(groups, fused=True, **kw)
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, **kw)


def probe(model, device, heldout, amp):
    """Quick in-training check: retrieval EM on 64 held-out-seed examples at 1024, held-out NLL."""
    model.eval()
    with amp():
        r = ev.line_retrieval(model, [1024], 64, device, seed=tasks.EVAL_SEED + 1, n_show=0)["1024"]["exact_match"]
    h = ev.heldout_perplexity(model, heldout[:16 * 2048], device, autocast=amp)["nll_per_byte"]
    model.train()
    return r, h


def train(model, args, device, corpus, heldout, log_path, final):
    """Runs the time-boxed loop; progress goes into `final` (kept if the loop raises)."""
    amp_on = device.type == "cuda" and not args.no_amp

    def amp():
        if amp_on:
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return torch.autocast(device_type="cpu", enabled=False)

    curriculum = parse_curriculum(args.curriculum)
    batcher = Batcher(corpus, args.ret_frac, args.seed)
    opt = make_optimizer(model, args, device)
    budget = args.minutes * 60.0
    vocab = model.cfg["vocab_size"]
    step, tokens_seen, max_t, t0 = 0, 0, 0, time.time()
    last_log = last_probe = t0
    logf = open(log_path, "w", newline="")
    writer = csv.writer(logf)
    writer.writerow(["step", "time_s", "loss", "lm_loss", "answer_digit_acc", "lr", "seq_len", "probe_em_1024",
                     "probe_heldout_nll"])
    model.train()
    while True:
        elapsed = time.time() - t0
        frac = elapsed / budget
        if args.max_steps:
            frac = max(frac, step / args.max_steps)
        if frac >= 1.0:
            break
        t = [tt for start, tt in curriculum if frac >= start][-1]
        t = min(t, args.seq_len)
        rows = max(1, args.tokens_per_step // t)
        ids, w, ans, is_lm = batcher.batch(rows, t)
        ids_d, w_d = to_device(ids, device), to_device(w[:, 1:].copy(), device)
        x, y = ids_d[:, :-1], ids_d[:, 1:]
        lr = lr_at(step, frac, args)
        for g in opt.param_groups:
            g["lr"] = lr
        with amp():
            logits = model(x)
        tok_loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1), reduction="none")
        tok_loss = tok_loss.view(rows, t)
        loss = (tok_loss * w_d).sum() / w_d.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        tokens_seen += rows * t
        max_t = max(max_t, t)
        now = time.time()
        if now - last_log >= args.log_every_s or step == 1 or (args.max_steps and step == args.max_steps):
            with torch.no_grad():
                lm_rows = torch.from_numpy(is_lm).to(device)
                lm_loss = float(tok_loss[lm_rows].mean()) if is_lm.any() else float("nan")
                ans_d = torch.from_numpy(ans[:, 1:].copy()).to(device)
                pred = logits.argmax(-1)
                acc = float((pred == y)[ans_d].float().mean()) if ans.any() else float("nan")
            loss_v = float(loss)
            pr_em = pr_nll = ""
            if now - last_probe >= args.probe_every_s:
                pr_em, pr_nll = probe(model, device, heldout, amp)
                last_probe = time.time()
                # Safety net for the one-shot GPU run: if lookup still lags once 40% of the budget
                # is gone, give retrieval rows more of each batch for the rest of the run.
                if args.adaptive_ret and frac > 0.4 and pr_em < 0.9 and batcher.ret_frac < args.adaptive_ret:
                    batcher.ret_frac = args.adaptive_ret
                    log("probe EM@1024 %.3f < 0.9 at %.0f%% of budget: retrieval rows -> %.0f%%" % (
                        pr_em, 100 * frac, 100 * args.adaptive_ret))
            el = time.time() - t0
            writer.writerow([step, round(el, 2), round(loss_v, 5), round(lm_loss, 5), round(acc, 4),
                             "%.3g" % lr, t, pr_em if pr_em == "" else round(pr_em, 4),
                             pr_nll if pr_nll == "" else round(pr_nll, 4)])
            logf.flush()
            msg = "step %6d  t %6.1fs  T %4d  loss %.4f  lm %.4f  ans_digit_acc %.3f  lr %.2e  tok/s %.0f" % (
                step, el, t, loss_v, lm_loss, acc, lr, tokens_seen / max(el, 1e-9))
            if pr_em != "":
                msg += "  | probe EM@1024 %.3f  heldout nll %.3f" % (pr_em, pr_nll)
            log(msg)
            final.update({"loss": loss_v, "lm_loss": lm_loss, "answer_digit_acc": acc, "steps": step,
                          "tokens_seen": tokens_seen, "train_seconds": round(el, 1), "max_seq_len_trained": max_t,
                          "ret_frac_final": batcher.ret_frac})
            last_log = now
    if device.type == "cuda":
        torch.cuda.synchronize()
    final.update({"loss_last_step": float(loss), "steps": step, "tokens_seen": tokens_seen,
                  "train_seconds": round(time.time() - t0, 1), "ret_frac_final": batcher.ret_frac,
                  "max_seq_len_trained": max_t})
    logf.close()


def export(model, cfg, out_dir, heldout_path, dtype_name):
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype_name]
    state = export_state(model, dtype)
    save_safetensors(os.path.join(out_dir, "model.safetensors"), state)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(cfg, dtype_name), f, indent=2)
    with open(os.path.join(out_dir, "kvcomp_tokenizer.json"), "w") as f:
        json.dump(tasks.TOKENIZER_JSON, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": tasks.BOS_ID, "eos_token_id": tasks.EOS_ID, "pad_token_id": tasks.PAD_ID,
                   "do_sample": False}, f, indent=2)
    shutil.copyfile(heldout_path, os.path.join(out_dir, "heldout.txt"))
    return state


def model_card(ev_json):
    """Markdown generated from eval.json only (no hand-written numbers)."""
    c, tr, ho = ev_json["config"], ev_json["training"], ev_json["heldout"]
    lr_rows = "\n".join("| %s | %d | %.1f | %.1f%% | %s |" % (
        k, v["n"], v["mean_lines"], 100 * v["exact_match"], " / ".join(
            "-" if x is None else "%.0f%%" % (100 * x) for x in v["em_by_third"]))
        for k, v in ev_json["line_retrieval"].items())
    hf = ev_json.get("hf_crosscheck", {})
    hf_line = ("transformers %s LlamaForCausalLM logits vs ours on %d held-out tokens: max |diff| %.2e "
               "(max |logit| %.1f), argmax agreement %.4f." % (
                   hf["transformers_version"], hf["n_tokens"], hf["max_abs_logit_diff"], hf["max_abs_logit"],
                   hf["argmax_agreement"])) if "max_abs_logit_diff" in hf else (
        "transformers cross-check: %s." % (hf.get("error") or "transformers not importable, not run"))
    return """# kvcomp default model

A byte-level Llama (Hugging Face `LlamaForCausalLM` layout) trained by `tools/model/train_default_model.py`.

| | |
|---|---|
| architecture | Llama: RMSNorm (eps {eps}), RoPE rotate_half (theta {theta:g}), SwiGLU, GQA, no biases, untied lm_head |
| size | hidden {hidden}, {layers} layers, {heads} query heads x {hd}, {kv} KV heads, MLP {inter}; {params:,} parameters |
| weights | `model.safetensors`, {dtype}, {mib:.2f} MiB |
| tokenizer | bytes: ids 0-255 = bytes, 256 `<bos>`, 257 `<eos>`, 258 `<pad>`; vocab padded to {vocab} (`kvcomp_tokenizer.json`) |
| context | trained on rows of up to {seq} tokens; max_position_embeddings {maxpos} (positions past {seq} untrained) |
| corpus | King James Bible (public domain), from Debian's `bible-kjv-text` via `tools/model/corpus.py`: {corpus_bytes:,} bytes train, held-out chapters in `heldout.txt` |
| synthetic task | line retrieval, LongEval style (`tools/model/tasks.py`), {ret:.0f}% of training rows (at the end: {ret_end:.0f}%) |
| training | {steps:,} steps, {tokens:,} tokens, {secs:.0f} s on {gpu} (torch {torch}) |
| final training loss | {loss:.4f} (corpus rows {lm:.4f}); answer-digit accuracy in the last logged batch {acc:.3f} |
| held-out perplexity | {ppl:.3f} per byte ({bpb:.3f} bits/byte) over {hbytes:,} bytes, windows of {win} |

## Line retrieval (greedy decoding, exact match of `<DDDDD>`, fp32 inference on the exported weights)

| context tokens | examples | lines in record | exact match | EM by position of the asked line (first / middle / last third) |
|---|---|---|---|---|
{lr_rows}

{hf_line}

Regenerate: `python3 tools/model/train_default_model.py --corpus tools/model/data/kjv_train.txt --out DIR --minutes {minutes:g}`
(seed {seed}; the run is time-boxed, so steps and numbers vary slightly with the GPU).
""".format(eps=c["rms_norm_eps"], theta=c["rope_theta"], hidden=c["hidden_size"], layers=c["num_hidden_layers"],
           heads=c["num_attention_heads"], hd=c["head_dim"], kv=c["num_key_value_heads"],
           inter=c["intermediate_size"], params=ev_json["parameters"], dtype=ev_json["weights_dtype"],
           mib=ev_json["weights_file_bytes"] / 2 ** 20, vocab=c["vocab_size"], seq=tr["max_seq_len_trained"],
           maxpos=c["max_position_embeddings"], corpus_bytes=tr["corpus_bytes"], ret=100 * tr["ret_frac"],
           ret_end=100 * tr["ret_frac_final"],
           steps=tr["steps"], tokens=tr["tokens_seen"], secs=tr["train_seconds"], gpu=ev_json["device_name"],
           torch=ev_json["torch_version"], loss=tr["loss"], lm=tr["lm_loss"], acc=tr["answer_digit_acc"],
           ppl=ho["ppl_per_byte"], bpb=ho["bits_per_byte"], hbytes=ho["n_bytes"], win=ho["window"],
           lr_rows=lr_rows, hf_line=hf_line, minutes=tr["minutes"], seed=tr["seed"])


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="training text (tools/model/data/kjv_train.txt)")
    ap.add_argument("--heldout", help="held-out text (default: corpus path with _train -> _heldout)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=6.0, help="training time budget (export+eval come after)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: time only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny architecture for CPU smoke tests")
    ap.add_argument("--hidden", type=int), ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int), ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--intermediate", type=int)
    ap.add_argument("--vocab", type=int, default=320)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--max-pos", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--curriculum", default="512@0,1024@0.1,2048@0.3", help="T@fraction_of_budget,...")
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--ret-frac", type=float, default=0.6, help="fraction of rows that are line retrieval")
    ap.add_argument("--adaptive-ret", type=float, default=0.8,
                    help="raise --ret-frac to this if the in-training probe lags (0: off)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--no-amp", action="store_true")
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"], help="exported weights")
    ap.add_argument("--log-every-s", type=float, default=10.0)
    ap.add_argument("--probe-every-s", type=float, default=60.0)
    ap.add_argument("--eval-lengths", default="256,512,1024,2048,4096")
    ap.add_argument("--eval-n", type=int, default=200)
    ap.add_argument("--no-hf-check", action="store_true")
    return ap.parse_args()


def main():
    args = parse_args()
    t_start = time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    # fp32 matmuls (outside bf16 autocast) may use TF32 while training; evaluation goes back to full fp32.
    torch.set_float32_matmul_precision("high")
    heldout_path = args.heldout or args.corpus.replace("_train", "_heldout")
    if heldout_path == args.corpus or not os.path.exists(heldout_path):
        sys.exit("held-out text not found (%s): pass --heldout" % heldout_path)
    os.makedirs(args.out, exist_ok=True)
    corpus = np.frombuffer(open(args.corpus, "rb").read(), dtype=np.uint8)
    heldout = open(heldout_path, "rb").read()

    arch = dict(TINY_ARCH if args.tiny else DEFAULT_ARCH)
    for key, val in (("hidden_size", args.hidden), ("num_hidden_layers", args.layers),
                     ("num_attention_heads", args.heads), ("num_key_value_heads", args.kv_heads),
                     ("intermediate_size", args.intermediate)):
        if val:
            arch[key] = val
    cfg = dict(arch, vocab_size=args.vocab, max_position_embeddings=args.max_pos, rope_theta=args.rope_theta,
               rms_norm_eps=1e-5, initializer_range=0.02, bos_token_id=tasks.BOS_ID, eos_token_id=tasks.EOS_ID,
               pad_token_id=tasks.PAD_ID, tie_word_embeddings=False)
    if cfg["num_attention_heads"] * cfg["head_dim"] != cfg["hidden_size"]:
        log("note: heads x head_dim (%d) != hidden (%d); allowed in HF Llama via head_dim" % (
            cfg["num_attention_heads"] * cfg["head_dim"], cfg["hidden_size"]))
    model = LlamaForCausalLM(cfg)
    model.init_weights(args.seed)
    model.to(device)
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    log("kvcomp default model: %s params, %s, torch %s, device %s, corpus %d bytes, held-out %d bytes" % (
        "{:,}".format(num_params(model)), json.dumps(arch), torch.__version__, dev_name, len(corpus), len(heldout)))

    final = {"steps": 0, "tokens_seen": 0, "train_seconds": 0.0, "max_seq_len_trained": 0,
             "ret_frac_final": args.ret_frac}
    try:
        train(model, args, device, corpus, heldout, os.path.join(args.out, "train_log.csv"), final)
    except Exception:  # keep going: export what we have, so a late failure does not lose the run
        final["error"] = traceback.format_exc()[-2000:]
        log("TRAINING FAILED, exporting the current weights anyway:\n" + final["error"])
    log("training done: %d steps, %d tokens, %.1f s" % (final["steps"], final["tokens_seen"], final["train_seconds"]))

    # Export, then evaluate what was written: reload from our own safetensors file, in true fp32.
    torch.set_float32_matmul_precision("highest")
    t_ex = time.time()
    state = export(model, cfg, args.out, heldout_path, args.dtype)
    del model
    model = load_model(args.out, device)
    reread = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    mismatch = [k for k, v in state.items() if not torch.equal(v.float(), reread[k])]
    if mismatch:
        sys.exit("exported tensors do not read back equal: %s" % mismatch[:5])
    wbytes = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    log("exported %d tensors, %.2f MiB, re-read equal (%.1f s)" % (len(state), wbytes / 2 ** 20, time.time() - t_ex))
    evaluate_and_report(model, args, cfg, state, wbytes, final, device, dev_name, heldout, len(corpus), t_start)


def guarded(what, fn):
    """Runs one evaluation part; an exception becomes {"error": ...} instead of ending the run."""
    try:
        return fn()
    except Exception:
        err = traceback.format_exc()[-1500:]
        log("%s FAILED:\n%s" % (what, err))
        return {"error": err}


def evaluate_and_report(model, args, cfg, state, wbytes, final, device, dev_name, heldout, corpus_bytes, t_start):
    t_ev = time.time()
    ho = guarded("held-out perplexity", lambda: ev.heldout_perplexity(model, heldout, device))
    if "error" not in ho:
        log("held-out: ppl/byte %.4f, bits/byte %.4f over %d bytes" % (
            ho["ppl_per_byte"], ho["bits_per_byte"], ho["n_bytes"]))
    lengths = [int(x) for x in args.eval_lengths.split(",") if x]
    lr_res = guarded("line retrieval", lambda: ev.line_retrieval(model, lengths, args.eval_n, device))
    for k, v in lr_res.items():
        if k != "error":
            log("line retrieval @%5s: EM %.3f (%d ex, %.1f lines, by third %s, %.1fs)" % (
                k, v["exact_match"], v["n"], v["mean_lines"], v["em_by_third"], v["seconds"]))
    hf = {"available": False, "skipped": True} if args.no_hf_check else guarded(
        "transformers cross-check", lambda: ev.hf_crosscheck(args.out, model, device, heldout))
    log("transformers cross-check: %s" % json.dumps(hf)[:1000])

    ev_json = {
        "config": hf_config(cfg, args.dtype),
        "parameters": sum(v.numel() for v in state.values()),
        "weights_dtype": args.dtype,
        "weights_file_bytes": wbytes,
        "training": dict(final, minutes=args.minutes, seed=args.seed, seq_len=args.seq_len,
                         curriculum=args.curriculum, tokens_per_step=args.tokens_per_step, ret_frac=args.ret_frac,
                         lr=args.lr, min_lr_frac=args.min_lr_frac, warmup_steps=args.warmup_steps,
                         weight_decay=args.weight_decay, amp_bf16=device.type == "cuda" and not args.no_amp,
                         corpus=os.path.basename(args.corpus), corpus_bytes=corpus_bytes),
        "heldout": ho,
        "line_retrieval": lr_res,
        "line_retrieval_eval": {"seed": tasks.EVAL_SEED, "answer_len": tasks.ANSWER_LEN,
                                "decoding": "greedy (teacher-forced argmax check), fp32 on exported weights"},
        "hf_crosscheck": hf,
        "device_name": dev_name,
        "torch_version": torch.__version__,
        "eval_seconds": round(time.time() - t_ev, 1),
        "total_seconds": round(time.time() - t_start, 1),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "gpu_max_memory_allocated_gib": round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2)
        if device.type == "cuda" else None,
    }
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(ev_json, f, indent=1)
    card = guarded("model card", lambda: model_card(ev_json))
    if "error" not in card:
        with open(os.path.join(args.out, "model_card.md"), "w") as f:
            f.write(card)

    em_1k = lr_res.get("1024", {}).get("exact_match")
    rows = [("parameters", "{:,}".format(ev_json["parameters"])),
            ("weights", "%.2f MiB %s" % (wbytes / 2 ** 20, args.dtype)),
            ("device", dev_name), ("steps / tokens", "%d / %s" % (final["steps"], "{:,}".format(final["tokens_seen"]))),
            ("train time", "%.1f s" % final["train_seconds"]), ("final loss", "%.4f" % final.get("loss", float("nan"))),
            ("held-out ppl/byte", "%.4f" % ho.get("ppl_per_byte", float("nan")))]
    rows += [("line retrieval EM @%s" % k, "%.1f%%" % (100 * v["exact_match"])) for k, v in lr_res.items()
             if k != "error"]
    rows += [("hf logits max|diff|", str(hf.get("max_abs_logit_diff", hf.get("error", "n/a")))[:80])]
    rows += [("total wall", "%.1f s" % ev_json["total_seconds"])]
    rows += [("target EM@1024 >= 95%", "n/a" if em_1k is None else ("MET" if em_1k >= 0.95 else "NOT MET"))]
    log("\n==== kvcomp default model: summary ====")
    for k, v in rows:
        log("%-24s %s" % (k, v))
    log("outputs in %s" % os.path.abspath(args.out))


if __name__ == "__main__":
    main()
