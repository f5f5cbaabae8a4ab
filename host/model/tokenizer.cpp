// Tokenizer base, byte tokenizer, streaming decoder, UTF-8 helpers. See tokenizer.h.
#include "host/model/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "host/model/unicode.h"

namespace kvcomp::host {

std::string tokenizer::decode(const std::vector<int32_t> & ids, bool skip_special) const {
    std::string out;
    for (int32_t id : ids) {
        if (skip_special && is_special(id)) continue;
        out += token_bytes(id);
    }
    return out;
}

bool tokenizer::is_eos(int32_t id) const {
    return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

void tokenizer::set_special_ids(int32_t bos, std::vector<int32_t> eos, int32_t pad) {
    const int32_t n = vocab_size();
    auto check = [&](int32_t id, const char * what) {
        KVCOMP_CHECK_ARG(id >= -1 && id < n, kind(), " tokenizer: ", what, " id ", id,
                         " is outside the vocabulary [0, ", n, ")");
    };
    check(bos, "bos");
    check(pad, "pad");
    for (int32_t e : eos) check(e, "eos");
    eos.erase(std::remove(eos.begin(), eos.end(), -1), eos.end());
    bos_id_ = bos;
    eos_ids_ = std::move(eos);
    pad_id_ = pad;
}

// ---------------------------------------------------------------------------------------------
// byte_tokenizer

namespace {
const char * const k_byte_special_names[3] = {"<bos>", "<eos>", "<pad>"};
}

byte_tokenizer::byte_tokenizer(int32_t bos, int32_t eos, int32_t pad) {
    KVCOMP_CHECK_ARG(bos >= 256 && eos >= 256 && pad >= 256,
                     "byte tokenizer: special ids must be >= 256, got bos=", bos, " eos=", eos, " pad=", pad);
    KVCOMP_CHECK_ARG(bos != eos && bos != pad && eos != pad,
                     "byte tokenizer: special ids must be distinct, got bos=", bos, " eos=", eos,
                     " pad=", pad);
    KVCOMP_CHECK_ARG(std::max({bos, eos, pad}) < 65536,
                     "byte tokenizer: special ids must be < 65536, got bos=", bos, " eos=", eos,
                     " pad=", pad);
    bos_id_ = bos;
    eos_ids_ = {eos};
    pad_id_ = pad;
    vocab_size_ = std::max({bos, eos, pad}) + 1;
}

std::vector<int32_t> byte_tokenizer::encode(std::string_view text, const encode_options & opt) const {
    std::vector<int32_t> ids;
    ids.reserve(text.size() + 1);
    if (opt.add_special) ids.push_back(bos_id_);
    const int32_t special_ids[3] = {bos_id_, eos_id(), pad_id_};
    for (size_t i = 0; i < text.size();) {
        bool matched = false;
        if (opt.parse_special && text[i] == '<') {
            for (int k = 0; k < 3 && !matched; ++k) {
                const std::string_view name = k_byte_special_names[k];
                if (text.substr(i, name.size()) == name) {
                    ids.push_back(special_ids[k]);
                    i += name.size();
                    matched = true;
                }
            }
        }
        if (!matched) ids.push_back(int32_t(uint8_t(text[i++])));
    }
    return ids;
}

std::string byte_tokenizer::token_bytes(int32_t id) const {
    if (id >= 0 && id < 256) return std::string(1, char(uint8_t(id)));
    if (id == bos_id_) return k_byte_special_names[0];
    if (id == eos_id()) return k_byte_special_names[1];
    if (id == pad_id_) return k_byte_special_names[2];
    KVCOMP_THROW(status::invalid_argument, "byte tokenizer: token id ", id,
                 " has no text (ids 0..255 are bytes, ", bos_id_, "/", eos_id(), "/", pad_id_,
                 " are <bos>/<eos>/<pad>)");
}

bool byte_tokenizer::is_special(int32_t id) const {
    return id == bos_id_ || id == eos_id() || id == pad_id_;
}

// ---------------------------------------------------------------------------------------------
// stream_decoder and UTF-8 helpers

std::string stream_decoder::push(int32_t id) {
    if (skip_special_ && tok_.is_special(id)) return {};
    pending_ += tok_.token_bytes(id);
    const size_t hold = utf8_incomplete_tail(pending_);
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
}

std::string stream_decoder::finish() {
    std::string out;
    out.swap(pending_);
    return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
    // Find the lead byte among the last 3 bytes; it must announce more bytes than follow it and the
    // bytes that do follow must be a valid prefix (utf8_next stops exactly at the end then).
    const size_t n = s.size();
    for (size_t k = 1; k <= 3 && k <= n; ++k) {
        const uint8_t b = uint8_t(s[n - k]);
        if ((b & 0xC0) == 0x80) continue;  // continuation: keep looking back
        if (b < 0xC2 || b > 0xF4) return 0;
        const size_t want = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
        if (k >= want) return 0;
        uint32_t cp;
        return utf8_next(s, n - k, cp) == k ? k : 0;  // == k: ran out of input while still valid
    }
    return 0;
}

std::string utf8_sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        const size_t len = utf8_next(s, i, cp);
        if (cp == k_invalid_code_point)
            out += "\xEF\xBF\xBD";
        else
            out.append(s.substr(i, len));
        i += len;
    }
    return out;
}

bool utf8_is_valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        i += utf8_next(s, i, cp);
        if (cp == k_invalid_code_point) return false;
    }
    return true;
}

}  // namespace kvcomp::host
