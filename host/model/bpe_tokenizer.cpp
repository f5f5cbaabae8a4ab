// Byte-level BPE from Hugging Face tokenizer.json. See bpe_tokenizer.h for what is supported.
#include "host/model/bpe_tokenizer.h"

#include <algorithm>
#include <queue>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "host/model/unicode.h"

namespace kvcomp::host {

using json = nlohmann::json;

namespace {

std::string type_of(const json & j) {
    return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

bool get_bool(const json & j, const char * key, bool def) {
    return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : def;
}

bool is_word_char(uint32_t cp) {
    const char_class c = classify(cp);
    return c == char_class::letter || c == char_class::number || cp == '_';
}

// Last / first code point of a non-empty string.
uint32_t last_cp(std::string_view s) {
    size_t i = s.size() - 1;
    while (i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80) --i;
    uint32_t cp;
    utf8_next(s, i, cp);
    return cp;
}
uint32_t first_cp(std::string_view s) {
    uint32_t cp;
    utf8_next(s, 0, cp);
    return cp;
}

struct segment {
    size_t begin, end;
    int32_t id;  // -1: plain text
};

}  // namespace

std::unique_ptr<bpe_tokenizer> bpe_tokenizer::from_json(const std::string & json_text,
                                                        const std::string & source) {
    std::unique_ptr<bpe_tokenizer> t(new bpe_tokenizer());
    t->parse(json_text, source);
    return t;
}

void bpe_tokenizer::parse(const std::string & json_text, const std::string & source) {
    source_ = source;
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception & e) {
        KVCOMP_THROW(status::invalid_argument, source, ": not valid JSON: ", e.what());
    }
    auto fail = [&](const std::string & field, const std::string & what) {
        KVCOMP_THROW(status::invalid_argument, source, ": ", field, " ", what);
    };
    if (!j.is_object()) fail("top level", "is not a JSON object");

    // --- model ---
    if (!j.contains("model") || !j["model"].is_object()) fail("field 'model'", "is missing");
    const json & m = j["model"];
    const std::string mtype = type_of(m);
    if (!mtype.empty() && mtype != "BPE")
        fail("model.type", "'" + mtype + "' is not supported (only byte-level BPE)");
    if (!m.contains("vocab") || !m["vocab"].is_object()) fail("model.vocab", "is missing or not an object");
    if (!m.contains("merges") || !m["merges"].is_array()) fail("model.merges", "is missing or not a list");
    if (get_bool(m, "byte_fallback", false))
        fail("model.byte_fallback",
             "is true: SentencePiece-style BPE is not supported (only byte-level BPE)");
    for (const char * key : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
            fail(std::string("model.") + key, "= '" + m[key].get<std::string>() + "' is not supported");
    if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() != 0.0)
        fail("model.dropout", "= " + m["dropout"].dump() + " is not supported");
    ignore_merges_ = get_bool(m, "ignore_merges", false);

    int32_t max_id = -1;
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
            it.value().get<int64_t>() > INT32_MAX)
            fail("model.vocab['" + it.key() + "']", "is not a valid id: " + it.value().dump());
        const int32_t id = it.value().get<int32_t>();
        vocab_[it.key()] = id;
        max_id = std::max(max_id, id);
    }

    // --- added tokens ---
    int32_t max_added = -1;
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
        if (!j["added_tokens"].is_array()) fail("added_tokens", "is not a list");
        for (const json & a : j["added_tokens"]) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
                !a.contains("content") || !a["content"].is_string())
                fail("added_tokens entry", a.dump() + " needs an integer 'id' and a string 'content'");
            added_token t{a["id"].get<int32_t>(),
                          a["content"].get<std::string>(),
                          get_bool(a, "special", false),
                          get_bool(a, "lstrip", false),
                          get_bool(a, "rstrip", false),
                          get_bool(a, "single_word", false),
                          get_bool(a, "normalized", !get_bool(a, "special", false))};
            if (t.content.empty()) continue;
            bool dup = false;
            for (const added_token & o : added_)
                if (o.content == t.content) dup = true;
            if (dup) continue;  // the reference ignores a token added twice
            // Ids as Hugging Face assigns them when loading (the file's "id" is only checked there, with
            // a warning): content already in the vocab keeps its vocab id; otherwise the next id after
            // the largest added id, or the vocab size.
            auto in_vocab = vocab_.find(t.content);
            if (in_vocab != vocab_.end()) {
                t.id = in_vocab->second;
            } else {
                const int32_t model_n = int32_t(vocab_.size());
                t.id = max_added < 0 ? model_n : (max_added >= model_n ? max_added + 1 : model_n);
            }
            max_added = std::max(max_added, t.id);
            max_id = std::max(max_id, t.id);
            added_.push_back(std::move(t));
        }
    }
    id_to_token_.assign(size_t(max_id + 1), std::string());
    id_kind_.assign(size_t(max_id + 1), 0);
    for (const auto & kv : vocab_) {
        if (id_kind_[size_t(kv.second)] != 0)
            fail("model.vocab", "maps two tokens to id " + std::to_string(kv.second) + ": '" +
                                    id_to_token_[size_t(kv.second)] + "' and '" + kv.first + "'");
        id_to_token_[size_t(kv.second)] = kv.first;
        id_kind_[size_t(kv.second)] = 1;
    }
    for (const added_token & a : added_) {
        id_to_token_[size_t(a.id)] = a.content;  // Hugging Face resolves ids through added tokens first
        id_kind_[size_t(a.id)] = a.special ? 3 : 2;
    }
    // Longest first, so the first match at a position is the longest (leftmost-longest).
    std::stable_sort(added_.begin(), added_.end(), [](const added_token & a, const added_token & b) {
        return a.content.size() > b.content.size();
    });
    for (size_t i = 0; i < added_.size(); ++i)
        if (!added_[i].content.empty()) added_by_first_[uint8_t(added_[i].content[0])].push_back(uint32_t(i));

    if (m.contains("unk_token") && m["unk_token"].is_string()) {
        auto it = vocab_.find(m["unk_token"].get<std::string>());
        if (it == vocab_.end())
            fail("model.unk_token", "'" + m["unk_token"].get<std::string>() + "' is not in the vocab");
        unk_id_ = it->second;
    }

    // --- merges ---
    uint32_t rank = 0;
    for (const json & e : m["merges"]) {
        std::string a, b;
        if (e.is_string()) {
            const std::string s = e.get<std::string>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                fail("model.merges[" + std::to_string(rank) + "]",
                     "'" + s + "' is not two tokens separated by one space");
            a = s.substr(0, sp);
            b = s.substr(sp + 1);
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            a = e[0].get<std::string>();
            b = e[1].get<std::string>();
        } else {
            fail("model.merges[" + std::to_string(rank) + "]",
                 e.dump() + " is not \"a b\" or [\"a\", \"b\"]");
        }
        auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
        if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end())
            fail("model.merges[" + std::to_string(rank) + "]", "('" + a + "', '" + b + "'): '" +
                                                                   (ia == vocab_.end()   ? a
                                                                    : ib == vocab_.end() ? b
                                                                                         : a + b) +
                                                                   "' is not in the vocab");
        // A repeated pair keeps its last rank, as Hugging Face's map insertion does.
        merges_[(uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second)] = {rank, iab->second};
        ++rank;
    }

    // --- normalizer ---
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
        const std::string nt = type_of(j["normalizer"]);
        const bool empty_seq = nt == "Sequence" && j["normalizer"].contains("normalizers") &&
                               j["normalizer"]["normalizers"].is_array() &&
                               j["normalizer"]["normalizers"].empty();
        if (nt != "NFC" && !empty_seq)
            fail("normalizer",
                 "type '" + nt + "' is not supported (null or NFC; NFC is not applied, see bpe_tokenizer.h)");
    }

    // --- pre_tokenizer ---
    if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null())
        fail("pre_tokenizer", "is null: byte-level BPE needs a ByteLevel pre_tokenizer");
    std::vector<const json *> pre;
    if (type_of(j["pre_tokenizer"]) == "Sequence") {
        if (!j["pre_tokenizer"].contains("pretokenizers") || !j["pre_tokenizer"]["pretokenizers"].is_array())
            fail("pre_tokenizer", "Sequence has no 'pretokenizers' list");
        for (const json & p : j["pre_tokenizer"]["pretokenizers"]) pre.push_back(&p);
    } else {
        pre.push_back(&j["pre_tokenizer"]);
    }
    for (size_t i = 0; i < pre.size(); ++i) {
        const json & p = *pre[i];
        const std::string pt = type_of(p);
        const std::string field = "pre_tokenizer[" + std::to_string(i) + "]";
        pre_stage st{};
        if (pt == "ByteLevel") {
            st.is_split = false;
            st.add_prefix_space = get_bool(p, "add_prefix_space", true);
            st.use_regex = get_bool(p, "use_regex", true);
            st.pattern = split_pattern::gpt2;
            if (i + 1 != pre.size()) fail(field, "ByteLevel must be the last pre-tokenizer");
        } else if (pt == "Split") {
            st.is_split = true;
            const json & pat = p.contains("pattern") ? p["pattern"] : json();
            if (!pat.is_object() || !pat.contains("Regex") || !pat["Regex"].is_string())
                fail(field, "Split pattern " + pat.dump() + " is not supported (only {\"Regex\": ...})");
            const std::string re = pat["Regex"].get<std::string>();
            if (!split_pattern_from_regex(re, st.pattern))
                fail(field,
                     "Split regex '" + re + "' is not one of the supported patterns (GPT-2, Llama 3, Qwen2)");
            const std::string behavior =
                p.contains("behavior") && p["behavior"].is_string() ? p["behavior"].get<std::string>() : "";
            if (behavior != "Isolated")
                fail(field, "Split behavior '" + behavior + "' is not supported (only Isolated)");
            if (get_bool(p, "invert", false)) fail(field, "Split with invert=true is not supported");
        } else {
            fail(field, "type '" + pt + "' is not supported (ByteLevel, Split, Sequence of them)");
        }
        stages_.push_back(st);
    }
    if (stages_.empty() || stages_.back().is_split)
        fail("pre_tokenizer", "has no ByteLevel stage (byte-level BPE needs one)");

    // --- decoder ---
    {
        const json & d = j.contains("decoder") ? j["decoder"] : json();
        std::string dt = type_of(d);
        if (dt == "Sequence" && d.contains("decoders") && d["decoders"].is_array() &&
            d["decoders"].size() == 1)
            dt = type_of(d["decoders"][0]);
        if (dt != "ByteLevel")
            fail("decoder", "type '" + (dt.empty() ? d.dump() : dt) + "' is not supported (only ByteLevel)");
    }

    // --- post_processor ---
    std::vector<const json *> procs;
    if (j.contains("post_processor") && !j["post_processor"].is_null()) {
        const json & pp = j["post_processor"];
        if (type_of(pp) == "Sequence" && pp.contains("processors") && pp["processors"].is_array())
            for (const json & p : pp["processors"]) procs.push_back(&p);
        else
            procs.push_back(&pp);
    }
    for (const json * p : procs) {
        const std::string pt = type_of(*p);
        if (pt == "ByteLevel") continue;  // only adjusts offsets
        if (pt != "TemplateProcessing") {
            unsupported_post_processor_ = pt.empty() ? p->dump() : pt;
            continue;
        }
        if (!p->contains("single") || !(*p)["single"].is_array())
            fail("post_processor", "TemplateProcessing has no 'single' template");
        bool after = false;
        for (const json & item : (*p)["single"]) {
            if (item.contains("Sequence")) {
                after = true;
                continue;
            }
            if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id"))
                fail("post_processor", "template item " + item.dump() + " is not supported");
            const std::string name = item["SpecialToken"]["id"].get<std::string>();
            const json & sp = p->contains("special_tokens") ? (*p)["special_tokens"] : json();
            if (!sp.is_object() || !sp.contains(name) || !sp[name].contains("ids") ||
                !sp[name]["ids"].is_array())
                fail("post_processor", "template token '" + name + "' is not in special_tokens");
            for (const json & id : sp[name]["ids"]) {
                const int32_t v = id.get<int32_t>();
                if (v < 0 || v >= vocab_size())
                    fail("post_processor", "template token '" + name + "' has unknown id " + id.dump());
                (after ? suffix_ids_ : prefix_ids_).push_back(v);
            }
        }
    }
}

int32_t bpe_tokenizer::token_to_id(const std::string & token) const {
    for (const added_token & a : added_)
        if (a.content == token) return a.id;
    auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
}

const std::string & bpe_tokenizer::id_to_token(int32_t id) const {
    static const std::string empty;
    return id >= 0 && id < vocab_size() ? id_to_token_[size_t(id)] : empty;
}

bool bpe_tokenizer::is_special(int32_t id) const {
    return id >= 0 && id < vocab_size() && id_kind_[size_t(id)] == 3;
}

std::string bpe_tokenizer::token_bytes(int32_t id) const {
    if (id < 0 || id >= vocab_size() || id_kind_[size_t(id)] == 0)
        KVCOMP_THROW(status::invalid_argument, source_, ": token id ", id, " is not in the vocabulary (size ",
                     vocab_size(), ")");
    // ByteLevel decoder: map every char back to its byte; a token with any char outside the
    // alphabet (e.g. an added token containing a plain space) is taken as raw UTF-8 text.
    const std::string & s = id_to_token_[size_t(id)];
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        i += utf8_next(s, i, cp);
        const int b = unicode_to_byte(cp);
        if (b < 0) return s;
        out += char(uint8_t(b));
    }
    return out;
}

void bpe_tokenizer::bpe_word(const std::string & word, std::vector<int32_t> & out) const {
    if (ignore_merges_) {
        auto it = vocab_.find(word);
        if (it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    struct symbol {
        int32_t id;
        int prev, next;
        bool alive;
    };
    std::vector<symbol> sym;
    for (size_t i = 0; i < word.size();) {
        uint32_t cp;
        const size_t len = utf8_next(word, i, cp);
        auto it = vocab_.find(word.substr(i, len));
        int32_t id = it != vocab_.end() ? it->second : unk_id_;
        if (id < 0) {
            const int b = unicode_to_byte(cp);
            KVCOMP_THROW(status::invalid_argument, source_, ": byte 0x", std::hex, b, std::dec, " ('",
                         word.substr(i, len), "') is not in the vocabulary and there is no unk_token");
        }
        const int k = int(sym.size());
        sym.push_back({id, k - 1, -1, true});
        if (k > 0) sym[size_t(k - 1)].next = k;
        i += len;
    }
    // Merge lowest rank first, leftmost on ties (Hugging Face's word merge with a binary heap).
    struct cand {
        uint32_t rank;
        int pos;
        int32_t new_id;
        bool operator>(const cand & o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<cand, std::vector<cand>, std::greater<cand>> heap;
    auto push_pair = [&](int left) {
        if (left < 0 || sym[size_t(left)].next < 0) return;
        const symbol & a = sym[size_t(left)];
        auto it = merges_.find((uint64_t(uint32_t(a.id)) << 32) | uint32_t(sym[size_t(a.next)].id));
        if (it != merges_.end()) heap.push({it->second.rank, left, it->second.new_id});
    };
    for (int k = 0; k + 1 < int(sym.size()); ++k) push_pair(k);
    while (!heap.empty()) {
        const cand c = heap.top();
        heap.pop();
        symbol & a = sym[size_t(c.pos)];
        if (!a.alive || a.next < 0) continue;
        // Stale entry: the pair at this position changed since it was queued.
        auto it = merges_.find((uint64_t(uint32_t(a.id)) << 32) | uint32_t(sym[size_t(a.next)].id));
        if (it == merges_.end() || it->second.new_id != c.new_id) continue;
        symbol & b = sym[size_t(a.next)];
        a.id = c.new_id;
        b.alive = false;
        a.next = b.next;
        if (b.next >= 0) sym[size_t(b.next)].prev = c.pos;
        push_pair(a.prev);
        push_pair(c.pos);
    }
    for (const symbol & s : sym)
        if (s.alive) out.push_back(s.id);
}

void bpe_tokenizer::encode_segment(std::string_view text, std::vector<int32_t> & out) const {
    std::vector<std::string> pieces{std::string(text)}, next;
    std::vector<std::pair<size_t, size_t>> ranges;
    for (const pre_stage & st : stages_) {
        next.clear();
        for (std::string & p : pieces) {
            if (!st.is_split && st.add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
            if (st.is_split || st.use_regex) {
                ranges.clear();
                split_text(st.pattern, p, ranges);
                for (const auto & r : ranges) next.push_back(p.substr(r.first, r.second - r.first));
            } else {
                next.push_back(std::move(p));
            }
        }
        pieces.swap(next);
    }
    for (const std::string & p : pieces)
        if (!p.empty()) bpe_word(bytes_to_byte_level(p), out);
}

std::vector<int32_t> bpe_tokenizer::encode(std::string_view text, const encode_options & opt) const {
    if (opt.add_special && !unsupported_post_processor_.empty())
        KVCOMP_THROW(status::unsupported, source_, ": post_processor '", unsupported_post_processor_,
                     "' is not supported, so encode(add_special=true) cannot add its tokens");
    // Added tokens split the text first: the non-normalized ones, then (in the remaining text) the
    // normalized ones; each pass is leftmost-longest.
    std::vector<segment> segs{{0, text.size(), -1}};
    for (int pass = 0; pass < 2; ++pass) {
        const bool normalized = pass == 1;
        std::vector<segment> out;
        for (const segment & sg : segs) {
            if (sg.id >= 0) {
                out.push_back(sg);
                continue;
            }
            size_t text_start = sg.begin, p = sg.begin;
            while (p < sg.end) {
                const added_token * hit = nullptr;
                for (uint32_t k : added_by_first_[uint8_t(text[p])]) {
                    const added_token & a = added_[k];
                    if (a.normalized != normalized || a.content.empty() || (a.special && !opt.parse_special))
                        continue;
                    if (a.content.size() <= sg.end - p && text.compare(p, a.content.size(), a.content) == 0) {
                        hit = &a;
                        break;
                    }
                }
                if (!hit) {
                    ++p;
                    continue;
                }
                size_t mb = p, me = p + hit->content.size();
                if (hit->single_word &&
                    ((mb > sg.begin && is_word_char(last_cp(text.substr(sg.begin, mb - sg.begin)))) ||
                     (me < sg.end && is_word_char(first_cp(text.substr(me, sg.end - me)))))) {
                    p = me;  // the reference skips the whole rejected match
                    continue;
                }
                // lstrip / rstrip: the token swallows adjacent whitespace.
                while (hit->lstrip && mb > text_start) {
                    size_t q = mb - 1;
                    while (q > text_start && (uint8_t(text[q]) & 0xC0) == 0x80) --q;
                    uint32_t cp;
                    utf8_next(text, q, cp);
                    if (classify(cp) != char_class::space) break;
                    mb = q;
                }
                while (hit->rstrip && me < sg.end) {
                    uint32_t cp;
                    const size_t len = utf8_next(text.substr(0, sg.end), me, cp);
                    if (classify(cp) != char_class::space) break;
                    me += len;
                }
                if (mb > text_start) out.push_back({text_start, mb, -1});
                out.push_back({mb, me, hit->id});
                p = text_start = me;
            }
            if (sg.end > text_start) out.push_back({text_start, sg.end, -1});
        }
        segs.swap(out);
    }
    std::vector<int32_t> ids(prefix_ids_.begin(), opt.add_special ? prefix_ids_.end() : prefix_ids_.begin());
    for (const segment & sg : segs) {
        if (sg.id >= 0)
            ids.push_back(sg.id);
        else
            encode_segment(text.substr(sg.begin, sg.end - sg.begin), ids);
    }
    if (opt.add_special) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
    return ids;
}

}  // namespace kvcomp::host
