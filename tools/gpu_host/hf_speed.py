#!/usr/bin/env python3
"""transformers' LlamaForCausalLM at Llama-3-8B shapes (random weights, bf16, sdpa): time to first
token and time between tokens, measured like `kvcomp bench` (prompt of random ids, greedy decode
with the dynamic cache), to sit next to kvcomp's numbers from the same run. Prefill computes the
logits of the last position only (logits_to_keep=1), as kvcomp does; a point that does not fit in
memory is recorded as such and the others still run."""
import argparse, json, time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--points", default="1x4096,16x4096,64x4096,1x32768")
ap.add_argument("--gen", type=int, default=16)
a = ap.parse_args()
cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=131072,
                  rope_theta=500000.0, rms_norm_eps=1e-5)
cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()


def measure(B, P):
    ids = torch.randint(0, 100000, (B, P), device="cuda")
    with torch.no_grad():
        model(ids[:, :16], logits_to_keep=1)  # warm-up: kernels and allocator
        torch.cuda.synchronize(); t0 = time.perf_counter()
        out = model(ids, use_cache=True, logits_to_keep=1)
        nxt = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize(); ttft = time.perf_counter() - t0
        pkv = out.past_key_values
        del out
        gaps = []
        for _ in range(a.gen - 1):
            t1 = time.perf_counter()
            o = model(nxt, past_key_values=pkv, use_cache=True)
            pkv = o.past_key_values; nxt = o.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize(); gaps.append(time.perf_counter() - t1)
    gaps.sort()
    tbt = gaps[len(gaps) // 2]
    return dict(batch=B, prompt=P, ttft_ms=ttft * 1e3, tbt_ms=tbt * 1e3, decode_tok_s=B / tbt)


rows = []
for pt in a.points.split(","):
    B, P = (int(x) for x in pt.split("x"))
    try:
        rows.append(measure(B, P))
    except torch.OutOfMemoryError as e:
        rows.append(dict(batch=B, prompt=P, error="out of memory: " + str(e).splitlines()[0]))
    print(rows[-1], flush=True)
    torch.cuda.empty_cache()
json.dump(dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, transformers=transformers.__version__,
               rows=rows), open(a.out, "w"), indent=1)
