"""A minimal Llama (Hugging Face LlamaForCausalLM semantics) in PyTorch, plus a safetensors writer/reader.

Why our own module instead of transformers: the training host has transformers but this machine does
not, and the C++ runtime must match a reference we can read line by line. Module and parameter names
are exactly HF's, so state_dict() keys are the checkpoint tensor names:

    model.embed_tokens.weight                          [vocab, hidden]
    model.layers.N.input_layernorm.weight              [hidden]
    model.layers.N.self_attn.{q,k,v,o}_proj.weight     [out, in]   (nn.Linear layout, no biases)
    model.layers.N.post_attention_layernorm.weight     [hidden]
    model.layers.N.mlp.{gate,up,down}_proj.weight      [out, in]
    model.norm.weight, lm_head.weight

Math (as HF): RMSNorm in fp32 then weight * x.to(input dtype); RoPE rotate_half form with
inv_freq = theta^(-2i/head_dim) over the full head_dim, cos/sin = cat(freqs, freqs); GQA where query
head h reads KV head h // (n_heads / n_kv_heads); causal softmax attention scaled 1/sqrt(head_dim);
MLP down(silu(gate(x)) * up(x)); pre-norm residual blocks. Works on torch 1.13 (manual attention)
and torch >= 2.0 (F.scaled_dot_product_attention).

Safetensors: 8-byte little-endian header length, JSON header {name: {dtype, shape, data_offsets}}
(offsets relative to the data section, contiguous, in file order), "__metadata__": {"format": "pt"},
header padded with spaces to a multiple of 8, then the raw little-endian tensor bytes.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rope_cos_sin(positions, head_dim, theta, dtype):
    """cos, sin of shape [T, head_dim] computed in fp32 (as HF) then cast to dtype."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = cfg["head_dim"]
        hidden = cfg["hidden_size"]
        self.q_proj = nn.Linear(hidden, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, use_sdpa=True):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_heads // self.n_kv
        if rep > 1:  # HF repeat_kv: KV head j serves query heads j*rep .. j*rep+rep-1
            k = k[:, :, None].expand(b, self.n_kv, rep, t, self.head_dim).reshape(b, self.n_heads, t, self.head_dim)
            v = v[:, :, None].expand(b, self.n_kv, rep, t, self.head_dim).reshape(b, self.n_heads, t, self.head_dim)
        if HAS_SDPA and use_sdpa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            s = s.masked_fill(causal, float("-inf"))
            o = torch.matmul(torch.softmax(s.float(), dim=-1).to(v.dtype), v)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, i = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, use_sdpa=True):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, use_sdpa)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if cfg.get("tie_word_embeddings"):
            raise ValueError("this module writes an untied lm_head; set tie_word_embeddings false")
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)

    def init_weights(self, seed):
        """N(0, initializer_range) everywhere; residual-output projections scaled by 1/sqrt(2 L)
        (GPT-2 style) so the residual stream does not grow with depth at init."""
        g = torch.Generator().manual_seed(seed)
        std = self.cfg["initializer_range"]
        out_std = std / math.sqrt(2 * self.cfg["num_hidden_layers"])
        for name, p in self.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.data.fill_(1.0)
            else:
                s = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                p.data.copy_(torch.randn(p.shape, generator=g) * s)

    def forward(self, ids, use_sdpa=True):
        """ids [B, T] int64 (positions 0..T-1) -> logits [B, T, vocab]."""
        x = self.model.embed_tokens(ids)
        pos = torch.arange(ids.shape[1], device=ids.device)
        cos, sin = rope_cos_sin(pos, self.cfg["head_dim"], self.cfg["rope_theta"], x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, use_sdpa)
        return self.lm_head(self.model.norm(x))


def num_params(model):
    return sum(p.numel() for p in model.parameters())


def hf_config(cfg, dtype_name):
    """config.json for transformers (4.x and 5.x): legacy rope_theta plus v5's rope_parameters."""
    out = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg["num_key_value_heads"],
        "head_dim": cfg["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": cfg["max_position_embeddings"],
        "initializer_range": cfg["initializer_range"],
        "rms_norm_eps": cfg["rms_norm_eps"],
        "rope_theta": float(cfg["rope_theta"]),
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(cfg["rope_theta"])},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "vocab_size": cfg["vocab_size"],
        "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": cfg["eos_token_id"],
        "pad_token_id": cfg["pad_token_id"],
        "tie_word_embeddings": False,
        "torch_dtype": dtype_name,
        "use_cache": True,
    }
    return out


def model_cfg_from_hf(hf):
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "initializer_range",
            "rms_norm_eps", "rope_theta", "vocab_size", "bos_token_id", "eos_token_id", "pad_token_id",
            "tie_word_embeddings")
    return {k: hf[k] for k in keys}


# ---- safetensors --------------------------------------------------------------------------------

_ST_DTYPES = {torch.float16: ("F16", "<f2"), torch.float32: ("F32", "<f4"), torch.bfloat16: ("BF16", None)}
_ST_NAMES = {"F16": (torch.float16, "<f2", 2), "F32": (torch.float32, "<f4", 4), "BF16": (torch.bfloat16, "<i2", 2)}


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    code, np_dtype = _ST_DTYPES[t.dtype]
    if t.dtype == torch.bfloat16:  # numpy has no bf16: write the raw 16-bit patterns
        return code, t.view(torch.int16).numpy().astype("<i2").tobytes()
    return code, t.numpy().astype(np_dtype).tobytes()


def save_safetensors(path, tensors, metadata=None):
    """tensors: ordered {name: torch.Tensor}. Writes one safetensors file."""
    header, blobs, offset = {"__metadata__": dict(metadata or {}, format="pt")}, [], 0
    for name, t in tensors.items():
        code, raw = _tensor_bytes(t)
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def load_safetensors(path):
    """Returns (ordered {name: torch.Tensor}, metadata). Checks that offsets tile the data section."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    body = memoryview(data)[8 + hlen:]
    out, expect = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        tdtype, np_dtype, size = _ST_NAMES[info["dtype"]]
        n = int(np.prod(info["shape"])) if info["shape"] else 1
        if begin != expect or end - begin != n * size:
            raise ValueError("safetensors %s: bad offsets for %s" % (path, name))
        arr = np.frombuffer(body[begin:end], dtype=np_dtype).reshape(info["shape"]).copy()
        t = torch.from_numpy(arr)
        out[name] = t.view(torch.bfloat16) if tdtype == torch.bfloat16 else t
        expect = end
    if expect != len(body):
        raise ValueError("safetensors %s: %d trailing bytes" % (path, len(body) - expect))
    return out, meta


def export_state(model, dtype):
    """state_dict in checkpoint order (embed, layers..., norm, lm_head) cast to dtype, on CPU."""
    return {k: v.detach().to("cpu", dtype) for k, v in model.state_dict().items()}


def load_model(model_dir, device="cpu"):
    """Builds the module from config.json and loads model.safetensors into fp32 parameters."""
    with open("%s/config.json" % model_dir) as f:
        hf = json.load(f)
    model = LlamaForCausalLM(model_cfg_from_hf(hf))
    tensors, _ = load_safetensors("%s/model.safetensors" % model_dir)
    missing = set(model.state_dict()) ^ set(tensors)
    if missing:
        raise ValueError("checkpoint/module name mismatch: %s" % sorted(missing)[:8])
    model.load_state_dict({k: v.float() for k, v in tensors.items()})
    return model.to(device).eval()
