#!/usr/bin/env python3
"""Self-checks of the default-model tooling (CPU, seconds): run before spending GPU time.

    /usr/bin/python3 tools/model/check_model.py

1. forward == a straightforward float64 NumPy re-derivation of HF Llama math (explicit per-head loops,
   RoPE written as pairs (x_i, x_{i+d/2}) rotated by pos * theta^(-2i/d), GQA head h -> KV head
   h // group), on random weights with GQA and head_dim * heads != hidden;
2. SDPA path == manual attention path (when this torch has SDPA);
3. safetensors: our writer's bytes parsed by an independent minimal parser (header length, 8-byte
   alignment, contiguous offsets, little-endian payload), F16/F32/BF16 round trips bit-exact;
4. export -> load_model round trip: same logits as the fp16-rounded model;
5. batched right-padded greedy decoding == one-prompt-at-a-time greedy decoding, and the one-forward
   teacher-forced exact match used by the eval agrees with greedy decoding;
6. task generators: deterministic, eval prompts fit their context, training-row masks and answer
   positions point at the right bytes.
Prints "N passed, N failed" and exits non-zero on any failure.
"""
import json
import math
import os
import random
import struct
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402
import eval_default_model as ev  # noqa: E402
from llama_model import (HAS_SDPA, LlamaForCausalLM, export_state, hf_config, load_model,  # noqa: E402
                         load_safetensors, save_safetensors)

CFG = dict(hidden_size=96, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=64, vocab_size=320, max_position_embeddings=4096,
           rope_theta=10000.0, rms_norm_eps=1e-5, initializer_range=0.02, bos_token_id=256,
           eos_token_id=257, pad_token_id=258, tie_word_embeddings=False)
RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append(ok)
    print("%s %s %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)


def make_model(seed=0):
    m = LlamaForCausalLM(CFG)
    m.init_weights(seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # non-trivial norm weights, larger weights: make every term matter
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.mul_(4.0)
    return m.eval()


def ref_forward(sd, cfg, ids):
    """float64 NumPy Llama forward written from the HF definitions, independent of llama_model.py."""
    w = {k: v.detach().double().numpy() for k, v in sd.items()}
    n_h, n_kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, theta, n_tok = cfg["rms_norm_eps"], cfg["rope_theta"], len(ids)

    def rms(x, g):
        return g * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))

    def rope(v):  # v [T, heads, d]: pair (i, i + d/2) rotated by angle pos * theta^(-2i/d)
        out = np.empty_like(v)
        half = d // 2
        for pos in range(n_tok):
            for i in range(half):
                a = pos * theta ** (-2.0 * i / d)
                c, s = math.cos(a), math.sin(a)
                x1, x2 = v[pos, :, i], v[pos, :, i + half]
                out[pos, :, i] = x1 * c - x2 * s
                out[pos, :, i + half] = x2 * c + x1 * s
        return out

    x = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(n_tok, n_h, d))
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(n_tok, n_kv, d))
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(n_tok, n_kv, d)
        o = np.zeros((n_tok, n_h, d))
        for head in range(n_h):
            kv = head // (n_h // n_kv)
            for i in range(n_tok):
                s = k[:i + 1, kv] @ q[i, head] / math.sqrt(d)
                e = np.exp(s - s.max())
                o[i, head] = (e / e.sum()) @ v[:i + 1, kv]
        x = x + o.reshape(n_tok, n_h * d) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        act = gate / (1.0 + np.exp(-gate)) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + act @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def check_forward():
    m = make_model()
    ids = [tasks.BOS_ID] + tasks.encode("line 17: REGISTER_CONTENT is <38012>\nWhat is")
    with torch.no_grad():
        ours = m(torch.tensor([ids]), use_sdpa=False)[0].double().numpy()
    ref = ref_forward(m.state_dict(), CFG, ids)
    err = np.abs(ours - ref).max()
    check("forward_vs_numpy_reference", err < 2e-5 * max(1.0, np.abs(ref).max()),
          "max|diff| %.2e, max|logit| %.2f, T=%d" % (err, np.abs(ref).max(), len(ids)))
    names = sorted(m.state_dict())
    expect = ["lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"]
    for layer in range(CFG["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        expect += [p + s for s in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                   "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                   "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                   "mlp.down_proj.weight")]
    check("hf_tensor_names", names == sorted(expect), "%d tensors" % len(names))
    if HAS_SDPA:
        with torch.no_grad():
            x = torch.randint(0, 256, (2, 40))
            d = (m(x, use_sdpa=True) - m(x, use_sdpa=False)).abs().max().item()
        check("sdpa_vs_manual", d < 1e-4, "max|diff| %.2e" % d)
    else:
        print("SKIP sdpa_vs_manual (torch %s has no scaled_dot_product_attention)" % torch.__version__)


def parse_safetensors_independently(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    ok = (8 + n) % 8 == 0 and header.get("__metadata__", {}).get("format") == "pt"
    data = raw[8 + n:]
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    ok = ok and spans[0][0] == 0 and spans[-1][1] == len(data)
    ok = ok and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    return ok, header, data


def check_safetensors(tmp):
    g = torch.Generator().manual_seed(3)
    ts = {"a.f16": (torch.randn(3, 5, generator=g) * 100).half(), "b.f32": torch.randn(7, generator=g),
          "c.bf16": torch.randn(2, 3, 4, generator=g).bfloat16(), "d.f16": torch.tensor([1.0, -2.5, 65504.0]).half()}
    path = os.path.join(tmp, "t.safetensors")
    save_safetensors(path, ts)
    ok, header, data = parse_safetensors_independently(path)
    b0, b1 = header["d.f16"]["data_offsets"]
    ok = ok and struct.unpack("<3e", data[b0:b1]) == (1.0, -2.5, 65504.0)
    b0, b1 = header["b.f32"]["data_offsets"]
    ok = ok and np.array_equal(np.frombuffer(data[b0:b1], "<f4"), ts["b.f32"].numpy())
    check("safetensors_layout", ok, "header %d bytes" % (len(open(path, "rb").read()) - len(data) - 8))
    back, _ = load_safetensors(path)
    same = all(back[k].dtype == v.dtype and back[k].shape == v.shape and
               torch.equal(back[k].view(torch.int16) if v.element_size() == 2 else back[k],
                           v.view(torch.int16) if v.element_size() == 2 else v) for k, v in ts.items())
    check("safetensors_roundtrip", same and list(back) == list(ts), "dtypes F16/F32/BF16")


def check_export(tmp):
    m = make_model(5)
    d = os.path.join(tmp, "exp")
    os.makedirs(d)
    save_safetensors(os.path.join(d, "model.safetensors"), export_state(m, torch.float16))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(CFG, "float16"), f)
    m2 = load_model(d)
    m16 = make_model(5)
    with torch.no_grad():
        for p in m16.parameters():
            p.copy_(p.half().float())
        x = torch.randint(0, 256, (2, 33))
        diff = (m2(x) - m16(x)).abs().max().item()
    check("export_reload_logits", diff == 0.0, "max|diff| %.2e" % diff)
    cfg = json.load(open(os.path.join(d, "config.json")))
    need = ("architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
            "max_position_embeddings", "vocab_size", "bos_token_id", "eos_token_id", "tie_word_embeddings",
            "torch_dtype", "attention_bias", "mlp_bias", "hidden_act")
    check("config_keys", all(k in cfg for k in need) and cfg["model_type"] == "llama", "")


def check_greedy():
    m = make_model(7)
    rng = random.Random(0)
    prompts = [[tasks.BOS_ID] + [rng.randrange(256) for _ in range(n)] for n in (5, 17, 9, 30)]
    dev = torch.device("cpu")
    batched = ev.greedy_generate(m, prompts, 6, dev)
    single = [ev.greedy_generate(m, [p], 6, dev)[0] for p in prompts]
    check("greedy_batched_eq_single", batched == single, str(batched[0]))
    # teacher-forced scoring must agree with greedy decoding: the model's own greedy continuation is
    # a hit; changing its first or last token makes it a miss.
    own = ev.teacher_forced_hits(m, prompts, batched, dev)
    first = ev.teacher_forced_hits(m, prompts, [[(g[0] + 1) % 256] + g[1:] for g in batched], dev)
    last = ev.teacher_forced_hits(m, prompts, [g[:-1] + [(g[-1] + 1) % 256] for g in batched], dev)
    check("teacher_forced_eq_greedy", all(own) and not any(first) and not any(last), "")


def check_tasks():
    a, b = tasks.eval_set(1024, 20), tasks.eval_set(1024, 20)
    check("eval_set_deterministic", a == b and a != tasks.eval_set(512, 20), "")
    ok = True
    for length in (256, 512, 1024, 2048, 4096):
        for e in tasks.eval_set(length, 50):
            ok &= 1 + len(e["prompt"]) + tasks.ANSWER_LEN <= length
            ok &= ("line %d: REGISTER_CONTENT is %s\n" % (e["key"], e["answer"])) in e["prompt"]
            ok &= e["prompt"].count("line %d:" % e["key"]) == 1 and len(e["answer"]) == tasks.ANSWER_LEN
            ok &= e["prompt"].endswith("What is the REGISTER_CONTENT in line %d?\n" % e["key"])
    check("eval_prompts_fit_and_answerable", ok, "")
    rng = random.Random(1)
    ok = True
    for n in (129, 513, 2049):
        ids, mask, ans = tasks.line_retrieval_row(rng, n)
        text = "^" + tasks.decode(ids[1:])  # "^" stands for <bos>: text[t] is token t
        ok &= len(ids) == n == len(mask) == len(text) and ids[0] == tasks.BOS_ID and mask[0] == 0
        ok &= all(chr(ids[t]).isdigit() and mask[t] == 1 for t in ans) and len(ans) > 0
        record = dict((int(k), v) for k, v in
                      (l[5:].split(": REGISTER_CONTENT is ") for l in text[1:].split("\n")
                       if l.startswith("line ") and l.endswith(">")))
        for t in ans:  # every answer digit equals the digit of the asked line's value in the record
            q_start = text.rfind("line ", 0, t)
            key = int(text[q_start + 5:text.index("?", q_start)])
            pos = t - text.rfind("<", 0, t) - 1
            ok &= record[key][1 + pos] == chr(ids[t])
        ok &= all(mask[t] == 0 for t in range(n) if chr(ids[t]).isdigit() and t not in set(ans))
    check("train_row_masks_and_answers", ok, "")


def main():
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        check_forward()
        check_safetensors(tmp)
        check_export(tmp)
        check_greedy()
        check_tasks()
    failed = RESULTS.count(False)
    print("%d passed, %d failed" % (RESULTS.count(True), failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
