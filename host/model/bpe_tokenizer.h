// Hugging Face tokenizer.json, byte-level BPE flavour (GPT-2, Llama 3, Qwen2 and their relatives).
//
// Supported pieces of tokenizer.json (anything else is an invalid_argument error naming the field
// and the value, so an unsupported tokenizer fails at load, not with wrong ids):
//   model           {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...] or [["a","b"], ...],
//                   "ignore_merges", "unk_token"}; byte_fallback, continuing_subword_prefix,
//                   end_of_word_suffix and dropout must be off.
//   added_tokens    [{id, content, special, lstrip, rstrip, single_word, normalized}], matched in the
//                   raw text before anything else: first the non-normalized ones, then the normalized
//                   ones, leftmost-longest (Hugging Face's AddedVocabulary). Ids are assigned as
//                   Hugging Face does when loading: content already in the vocab takes the vocab id,
//                   others follow the vocab in file order (in real files this equals their "id").
//   normalizer      null, or NFC: NFC is NOT applied (no composition tables here); text that is not
//                   already NFC may tokenize differently from Hugging Face. Most text is NFC.
//   pre_tokenizer   ByteLevel (use_regex: GPT-2 split), or a Sequence of Split {Regex: one of the
//                   patterns in pretokenize.h, behavior Isolated, invert false} and ByteLevel.
//   post_processor  null, ByteLevel, TemplateProcessing (its "single" template: special tokens before
//                   and after $A), or a Sequence of those. Others load but encode(add_special=true)
//                   then throws unsupported.
//   decoder         ByteLevel (or a Sequence of only it): token text is mapped back through the
//                   GPT-2 alphabet; a token with a char outside the alphabet is emitted as its raw
//                   UTF-8 text, as Hugging Face does.
// Not supported: SentencePiece-style BPE (Metaspace pre-tokenizer, byte_fallback: Llama 2, Mistral
// v0.1), Unigram, WordPiece.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "host/model/pretokenize.h"
#include "host/model/tokenizer.h"

namespace kvcomp::host {

class bpe_tokenizer : public tokenizer {
  public:
    // Parses tokenizer.json text; `source` names the file in messages.
    static std::unique_ptr<bpe_tokenizer> from_json(const std::string & json_text,
                                                    const std::string & source = "tokenizer.json");

    std::vector<int32_t> encode(std::string_view text, const encode_options & opt = {}) const override;
    std::string token_bytes(int32_t id) const override;
    bool is_special(int32_t id) const override;
    int32_t vocab_size() const override { return int32_t(id_to_token_.size()); }
    const char * kind() const override { return "bpe"; }

    // The token's string as stored in tokenizer.json (byte-level alphabet for vocab entries); -1 /
    // empty when absent.
    int32_t token_to_id(const std::string & token) const;
    const std::string & id_to_token(int32_t id) const;
    // Template ids that encode(add_special=true) puts before / after the text.
    const std::vector<int32_t> & template_prefix() const { return prefix_ids_; }
    const std::vector<int32_t> & template_suffix() const { return suffix_ids_; }

  private:
    bpe_tokenizer() = default;

    struct added_token {
        int32_t id;
        std::string content;
        bool special, lstrip, rstrip, single_word, normalized;
    };
    struct merge_rule {
        uint32_t rank;
        int32_t new_id;
    };
    // One stage of pre-tokenization, applied to every piece in turn.
    struct pre_stage {
        bool is_split;          // true: regex split; false: ByteLevel (prefix space + optional gpt2 split)
        split_pattern pattern;  // for is_split, or the gpt2 split of a ByteLevel with use_regex
        bool add_prefix_space;  // ByteLevel only
        bool use_regex;         // ByteLevel only
    };

    void parse(const std::string & json_text, const std::string & source);
    // Appends the ids of one added-token-free segment: pre-tokenize, then BPE each piece.
    void encode_segment(std::string_view text, std::vector<int32_t> & out) const;
    void bpe_word(const std::string & word, std::vector<int32_t> & out) const;

    std::string source_;
    std::unordered_map<std::string, int32_t> vocab_;         // model vocab (byte-level strings)
    std::vector<std::string> id_to_token_;                   // model vocab + added tokens
    std::vector<uint8_t> id_kind_;                           // 0 unassigned, 1 vocab, 2 added, 3 special
    std::unordered_map<uint64_t, merge_rule> merges_;        // (left id << 32 | right id) -> rule
    std::vector<added_token> added_;                         // longest content first
    std::array<std::vector<uint32_t>, 256> added_by_first_;  // first byte -> indices into added_
    std::vector<pre_stage> stages_;
    bool ignore_merges_ = false;
    int32_t unk_id_ = -1;
    std::vector<int32_t> prefix_ids_, suffix_ids_;
    std::string unsupported_post_processor_;  // non-empty: add_special throws, naming it
};

}  // namespace kvcomp::host
