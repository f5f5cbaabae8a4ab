#!/usr/bin/env python3
"""Reference outputs from Hugging Face transformers for `kvcomp compare --reference`.

Loads a checkpoint with transformers' AutoModelForCausalLM (the class config.json names: Llama,
Mistral, Qwen2, SmolLM3) on the GPU, runs a prompt, and writes a safetensors file with tokens
(i32 [n]), logits of every prompt position (f32 [n, vocab]) and the greedy continuation
(i32 [steps]). kvcomp then runs the same prompt on each backend and reports logits NMSE and whether
the greedy tokens agree.

  hf_oracle.py --model DIR --dtype float32 --out ref.safetensors [--text-file F | --random-tokens N]
  hf_oracle.py --make-random DIR --layers 2      # a Llama-3-8B-shaped checkpoint with random weights
  hf_oracle.py --make-random-smollm3 DIR --layers 4
      # a small SmolLM3 checkpoint with random weights: hidden 512, 8 heads, 2 KV heads, head_dim 64,
      # no_rope_layers from the default interval 4 (layer 3 of 4 has no RoPE), fp32

No network: the model directory must be local. TF32 is off so float32 means float32.
"""
import argparse, json, os, sys

import torch
from safetensors.torch import save_file


def make_random(dir_, layers, seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=8192,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      bos_token_id=128000, eos_token_id=128001)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.float16)
    # Random init gives near-uniform logits; a wider embedding spread makes the greedy choice decisive
    # enough that fp16-level differences do not flip ties.
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
    model.save_pretrained(dir_, safe_serialization=True)
    print(f"wrote {dir_}: Llama-3-8B shapes, {layers} layers, fp16", flush=True)


def make_random_smollm3(dir_, layers, seed):
    """A small SmolLM3ForCausalLM with random weights, saved in fp32 (transformers >= 4.53).

    no_rope_layers is left to SmolLM3Config, which builds it from no_rope_layer_interval (4): the
    file then holds the list transformers computed, e.g. [1, 1, 1, 0] for 4 layers, and kvcomp reads
    that list. RoPE keeps SmolLM3's default theta (2e6): its first pairs still turn by about a
    radian per position, so the RoPE layers differ from the NoPE one within a short prompt.
    """
    if layers < 4:
        sys.exit("--make-random-smollm3 needs --layers >= 4: with the default interval the first layer "
                 "without RoPE is layer 3")
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model("smollm3", hidden_size=512, intermediate_size=1024, num_hidden_layers=layers,
                               num_attention_heads=8, num_key_value_heads=2, vocab_size=32000,
                               max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=True,
                               bos_token_id=1, eos_token_id=2, pad_token_id=0)
    assert list(cfg.no_rope_layers) == [int((l + 1) % 4 != 0) for l in range(layers)], cfg.no_rope_layers
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg).to(torch.float32)
    # As make_random: a wider embedding spread so the greedy choice is decisive.
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
    model.save_pretrained(dir_, safe_serialization=True)
    print(f"wrote {dir_}: SmolLM3, {layers} layers, no_rope_layers {list(cfg.no_rope_layers)}, fp32", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--make-random")
    ap.add_argument("--make-random-smollm3")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--text-file")
    ap.add_argument("--max-bytes", type=int, default=600)
    ap.add_argument("--bos", type=int, default=None, help="prepend this token id")
    ap.add_argument("--random-tokens", type=int, default=0)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if a.make_random:
        make_random(a.make_random, a.layers, a.seed)
        return
    if a.make_random_smollm3:
        make_random_smollm3(a.make_random_smollm3, a.layers, a.seed)
        return
    from transformers import AutoModelForCausalLM
    dtype = getattr(torch, a.dtype)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="eager").cuda().eval()
    if a.random_tokens:
        g = torch.Generator().manual_seed(a.seed)
        ids = torch.randint(0, min(model.config.vocab_size, 100000), (a.random_tokens,), generator=g).tolist()
    else:
        ids = list(open(a.text_file, "rb").read()[: a.max_bytes])  # byte tokenizer
    if a.bos is not None:
        ids = [a.bos] + ids
    x = torch.tensor([ids], device="cuda")
    with torch.no_grad():
        logits = model(x).logits[0].float()
        out = model.generate(x, max_new_tokens=a.steps, do_sample=False, min_new_tokens=a.steps,
                             eos_token_id=None, pad_token_id=0)
    greedy = out[0, len(ids):].tolist()
    save_file({"tokens": torch.tensor(ids, dtype=torch.int32), "logits": logits.cpu().contiguous(),
               "greedy": torch.tensor(greedy, dtype=torch.int32)}, a.out)
    print(json.dumps({"model": a.model, "class": type(model).__name__, "dtype": a.dtype, "prompt_tokens": len(ids),
                      "steps": len(greedy), "device": torch.cuda.get_device_name(0)}), flush=True)


if __name__ == "__main__":
    main()
