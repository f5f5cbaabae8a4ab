// What `kvcomp methods` prints: each KV method in a sentence and its options with their defaults,
// the user-facing counterpart of the option parsers (kv_method_quant_options.cpp,
// kv_method_lowrank_options.cpp, kv_method_window.cpp). tests/unit/test_kv_method_help.cpp checks
// that every option a parser accepts is listed here and every option listed here is accepted.
#include "engine/kv_method.h"

namespace kvcomp::engine {

namespace {

// kivi's and zipcache's options for the reduced cache of zack / fdc.
const char * const kLowrankQuantHelp =
    "  lowrank=none|zack|fdc   quantize zack's / fdc's reduced cache instead of the model's (default\n"
    "                     none); needs calib=FILE (kvcomp calibrate --method zack|fdc, this model) and\n"
    "                     rank=R (the dims every K and V head keeps: a multiple of 16 up to head_dim)\n";

const char * const kLowrankHelp =
    "  calib=FILE         required: a calibration file of this method for this model (kvcomp calibrate)\n"
    "  removal_rate=r     re-choose the ranks at singular-value removal rate r in [0, 1), or\n"
    "  compression=p      ... at the smallest r whose overall KV compression is >= p, p in (0, 1)\n"
    "                     (neither: the file's ranks)\n"
    "  rank_multiple=16   rounding of re-chosen ranks\n"
    "  schedule=balanced|plain   decode tasks of equal cost over the compute units (default), or one\n"
    "                     chunk length for all heads; results agree up to rounding\n"
    "  workers=auto|N     balanced: the workers tasks are cut for; auto (default) = the decode tasks the\n"
    "                     backend runs at once (palu: the compute units), N in 1..16 per compute unit\n"
    "  token_cost=auto|N  balanced: a task costs s_kv * (k_width + v_width + N); auto: 1 (ZACK / FDC),\n"
    "                     64 with kv_bits=4; N in [0, 4096]\n"
    "  task_cost=auto|N   balanced: each task also costs N (its start and partial) when the schedule\n"
    "                     search compares cuts; auto: the backend's (CUDA 16384; OpenCL GPUs 16384\n"
    "                     where a (request, KV head) row has 16 compute units, e.g. batch 1; 0\n"
    "                     otherwise); N in [0, 2^30]\n"
    "  tail=auto|N        balanced: N % of each request and KV head's tokens go into small tasks at\n"
    "                     the end of the list, for the compute units that finish first; auto: the\n"
    "                     backend's (CUDA 10 on f16 pages, others 0); N in [0, 50]\n"
    "  prefill=padded|ragged   prompt attention at head_dim on zero-padded heads (default) or in the\n"
    "                     reduced dims\n"
    "  prefill_balance=1|0     ragged prefill: row blocks per head scaled by its width (default 1)\n"
    "  kv_bits=16|4       zack / fdc pages: f16 (default) or 4-bit codes with an f16 min / step per\n"
    "                     token and head (not palu)\n"
    "  equalize=1|0       kv_bits=4: a per-channel equalization folded into the bases (default 1)\n"
    "  fold_qk=1|0        layers without RoPE: the K basis folded into W_Q / W_K at load (default 1)\n";

struct method_help {
    const char * name;
    const char * summary;
    const char * options;
    const char * more_options;  // appended (kLowrankQuantHelp), or empty
};

const method_help kHelp[] = {
    {"none", "the uncompressed fp16 paged KV cache, the baseline every method is measured against",
     "  (no options)\n", ""},
    {"window", "an fp16 cache of each request's most recent tokens (the sliding-window baseline)",
     "  window=N           tokens kept per request (required, N > 0)\n", ""},
    {"kivi",
     "KIVI: 2/4/8-bit codes, keys per channel over groups of tokens, values per token in groups of\n"
     "  channels; the most recent tokens stay fp16",
     "  bits=2|4|8         code width (default 2)\n"
     "  group=32           tokens per key group and channels per value group (16..4096)\n"
     "  residual=32        fp16 recent tokens (a multiple of group)\n",
     kLowrankQuantHelp},
    {"zipcache",
     "ZipCache: keys per channel, values channel-separable per token; the salient tokens (normalized\n"
     "  attention of probe queries) at hi_bits, the rest at lo_bits",
     "  ratio=0.4          salient fraction in [0, 1] (0 or 1: no saliency estimation)\n"
     "  hi_bits=4          code width of salient tokens (2, 4 or 8)\n"
     "  lo_bits=2          code width of the others (2, 4 or 8)\n"
     "  block=100          tokens per quantized block; also the fp16 decode window\n"
     "  probe_recent=0.05  prefill probe queries: the most recent fraction of the prompt ...\n"
     "  probe_random=0.05  ... and a random fraction\n"
     "  nnz=probe|causal   the normalized score's count of unmasked entries (default probe)\n"
     "  decode_probe_recent=5   decode probes per block: the most recent tokens ...\n"
     "  decode_probe_p=0.05     ... and a random fraction\n"
     "  seed=0             seed of the random probes\n"
     "  recompress=append|all   append (default): a full window becomes new blocks; all: the authors'\n"
     "                     mode, every flush re-quantizes all of the request's tokens (drifts)\n"
     "  select=device|host where the prefill ranks tokens (default device; the same ranking)\n"
     "  tail=quantize|window    the prompt's last len % block tokens: quantized at prefill (default)\n"
     "                     or kept in the fp16 decode window\n",
     kLowrankQuantHelp},
    {"zack",
     "ZACK: K and V in per-head reduced dims from SVD bases of calibration text (queries and keys\n"
     "  after RoPE; V with W_O), attention on them without decompression",
     kLowrankHelp, ""},
    {"fdc",
     "FDC: as zack, with the K basis from random-token calibration and the V basis from W_V",
     kLowrankHelp, ""},
    {"palu",
     "Palu (the baseline of FDC): a low-rank latent of K cached before RoPE and rebuilt with RoPE\n"
     "  every decode step; attention at full head_dim",
     kLowrankHelp, ""},
};

}  // namespace

std::string kv_method_help(const std::string & name) {
    for (const method_help & h : kHelp)
        if (name == h.name) return std::string(h.name) + ": " + h.summary + "\n" + h.options + h.more_options;
    std::string valid;
    for (const auto & n : kv_method_names()) valid += (valid.empty() ? "" : ", ") + n;
    KVCOMP_THROW(status::invalid_argument, "unknown KV method '", name, "'; valid methods: ", valid);
}

}  // namespace kvcomp::engine
