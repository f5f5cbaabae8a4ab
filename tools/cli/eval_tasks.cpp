// Task scoring shared by kvcomp eval and kvcomp sweep (see eval_tasks.h).
#include "cli/eval_tasks.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "host/eval/line_retrieval.h"
#include "host/eval/needle.h"
#include "host/eval/task_text.h"

namespace kvcomp::cli {

namespace {

struct method_run {
    double score = 0.0;
    double kv_bytes = 0.0;  // per request, mean over examples
    std::vector<std::vector<int32_t>> outputs;
};

// Runs every prompt as one request (continuous batching does the rest) and returns the outputs.
method_run run_prompts(engine::engine & eng, const std::vector<std::vector<int32_t>> & prompts, int64_t n_new) {
    std::vector<int64_t> ids;
    for (const auto & p : prompts) {
        engine::generation_request r;
        r.prompt = p, r.max_new_tokens = n_new, r.stop_at_eos = false;
        ids.push_back(eng.submit(r));
    }
    eng.run();
    method_run m;
    for (size_t i = 0; i < ids.size(); ++i) {
        const auto & res = eng.result(ids[i]);
        KVCOMP_CHECK_ARG(res.finish_reason != "error", "a request failed: ", res.error);
        m.outputs.push_back(res.tokens);
        m.kv_bytes += double(res.kv_bytes_peak);  // what the method held for it at most
    }
    m.kv_bytes /= double(ids.size());
    return m;
}

// Exact match of the greedy answer (as many tokens as the answer has) for each prompt.
void score_exact_match(engine::engine & eng, engine::engine * base, const host::tokenizer & tok,
                       const std::vector<std::vector<int32_t>> & prompts, const std::vector<std::string> & answers,
                       result_row & row) {
    int64_t ans_len = 0;
    for (const auto & a : answers) ans_len = std::max<int64_t>(ans_len, int64_t(tok.encode(a).size()));
    auto score = [&](engine::engine & e, method_run & m) {
        m = run_prompts(e, prompts, ans_len);
        long hits = 0;
        for (size_t i = 0; i < answers.size(); ++i) hits += tok.decode(m.outputs[i], true).rfind(answers[i], 0) == 0;
        m.score = double(hits) / double(answers.size());
    };
    method_run mine, ref;
    score(eng, mine);
    if (base) score(*base, ref); else ref = mine;
    row.metric = "exact_match", row.value = mine.score, row.baseline_value = ref.score;
    row.kv_bytes = mine.kv_bytes, row.kv_bytes_baseline = ref.kv_bytes;
}

// `count` windows of `context` tokens spread evenly over the text; the validation split's start half
// a stride later (eval_point::validation).
std::vector<std::vector<int32_t>> text_windows(const host::tokenizer & tok, const std::string & path, int64_t context,
                                               int64_t count, bool validation) {
    const std::string text = host::read_task_text(path);
    const auto ids = tok.encode(text);
    KVCOMP_CHECK_ARG(int64_t(ids.size()) >= context, "text file '", path, "' has ", ids.size(),
                     " tokens, fewer than the context ", context);
    std::vector<std::vector<int32_t>> out;
    const int64_t stride = std::max<int64_t>(1, (int64_t(ids.size()) - context) / std::max<int64_t>(1, count));
    for (int64_t i = 0; i < count; ++i) {
        std::vector<int32_t> w;
        if (tok.bos_id() >= 0) w.push_back(tok.bos_id());
        const int64_t start = std::min<int64_t>(i * stride + (validation ? stride / 2 : 0), int64_t(ids.size()) - context);
        w.insert(w.end(), ids.begin() + start, ids.begin() + start + context - int64_t(w.size()));
        out.push_back(std::move(w));
    }
    return out;
}

}  // namespace

void check_task(const std::string & task) {
    KVCOMP_CHECK_ARG(task == "line_retrieval" || task == "needle" || task == "greedy_agreement" || task == "perplexity",
                     "unknown task '", task, "'; valid tasks: line_retrieval, needle, greedy_agreement, perplexity");
}

std::vector<eval_point> task_points(const eval_point & proto, const std::vector<int64_t> & contexts,
                                    const std::vector<double> & depths) {
    KVCOMP_CHECK_ARG(proto.haystack == "keys" || proto.haystack == "text", "--haystack: unknown haystack '",
                     proto.haystack, "'; valid: keys, text");
    std::vector<eval_point> out;
    for (int64_t ctx : contexts) {
        eval_point p = proto;
        p.context = ctx;
        if (p.task != "needle") {
            out.push_back(p);
            continue;
        }
        for (double d : depths) p.depth = d, out.push_back(p);
    }
    return out;
}

std::string task_opts(const eval_point & p) {
    const std::string text = p.text_file.substr(p.text_file.find_last_of('/') + 1);
    std::ostringstream os;
    if (p.task == "needle") os << "depth=" << p.depth << ";haystack=" << p.haystack << (p.haystack == "text" ? ";text=" + text : "");
    else if (p.task == "greedy_agreement") os << "gen=" << p.gen << ";text=" << text;
    else if (p.task == "perplexity") os << "text=" << text;
    if (p.validation) os << (os.tellp() > 0 ? ";" : "") << "split=validation";
    return os.str();
}

void score_point(const eval_point & p, engine::engine & eng, engine::engine * base, const host::tokenizer & tok,
                 result_row & row) {
    check_task(p.task);
    const std::string & task = p.task;
    row.task_opts = task_opts(p);
    if (task == "line_retrieval" || task == "needle") {
        std::vector<std::vector<int32_t>> prompts;
        std::vector<std::string> answers;
        if (task == "line_retrieval") {
            for (auto & e : host::make_line_retrieval(tok, p.context, p.examples, p.seed))
                prompts.push_back(std::move(e.prompt)), answers.push_back(e.answer);
        } else {
            const std::string filler = p.haystack == "text" ? host::read_task_text(p.text_file) : std::string();
            for (auto & e : host::make_needle(tok, filler, p.context, p.depth, p.examples, p.seed))
                prompts.push_back(std::move(e.prompt)), answers.push_back(e.answer);
        }
        score_exact_match(eng, base, tok, prompts, answers, row);
    } else if (task == "perplexity") {
        // First half of each window is the prompt; the second half is fed token by token
        // (teacher forcing), so every scored token reads the method's cache.
        const auto windows = text_windows(tok, p.text_file, p.context, p.examples, p.validation);
        auto nll_of = [&](engine::engine & e, double & kv) {
            std::vector<int64_t> ids;
            for (const auto & w : windows) {
                engine::generation_request r;
                const auto half = w.begin() + long(w.size() / 2);
                r.prompt.assign(w.begin(), half);
                r.forced_tokens.assign(half, w.end());
                ids.push_back(e.submit(r));
            }
            e.run();
            double nll = 0, count = 0;
            kv = 0;
            for (size_t i = 0; i < ids.size(); ++i) {
                const auto & res = e.result(ids[i]);
                KVCOMP_CHECK_ARG(res.finish_reason != "error", "a request failed: ", res.error);
                for (double lp : res.token_logprobs) nll -= lp, count += 1;
                kv += double(res.kv_bytes_peak);
            }
            kv /= double(ids.size());
            return std::exp(nll / count);
        };
        double kv_mine = 0, kv_ref = 0;
        row.metric = "perplexity", row.value = nll_of(eng, kv_mine);
        row.baseline_value = base ? nll_of(*base, kv_ref) : (kv_ref = kv_mine, row.value);
        row.kv_bytes = kv_mine, row.kv_bytes_baseline = kv_ref;
    } else {
        const auto prompts = text_windows(tok, p.text_file, p.context, p.examples, p.validation);
        method_run mine = run_prompts(eng, prompts, p.gen);
        method_run ref = base ? run_prompts(*base, prompts, p.gen) : mine;
        double agree = 0;
        for (size_t i = 0; i < prompts.size(); ++i) {
            size_t k = 0;
            while (k < mine.outputs[i].size() && k < ref.outputs[i].size() && mine.outputs[i][k] == ref.outputs[i][k]) ++k;
            agree += double(k) / double(p.gen);
        }
        row.metric = "greedy_prefix_agreement", row.value = agree / double(prompts.size()), row.baseline_value = 1.0;
        row.kv_bytes = mine.kv_bytes, row.kv_bytes_baseline = ref.kv_bytes;
    }
}

}  // namespace kvcomp::cli
