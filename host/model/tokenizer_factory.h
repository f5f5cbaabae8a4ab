// Picks and loads the tokenizer of a model directory.
//
//   DIR/kvcomp_tokenizer.json  {"type": "byte", "bos_token_id": 256, "eos_token_id": 257,
//                              "pad_token_id": 258}: byte_tokenizer (ids default to these values).
//   else DIR/tokenizer.json    Hugging Face byte-level BPE (bpe_tokenizer). Its special ids come from
//                              the optional files next to it:
//                                bos: tokenizer_config.json "bos_token", else config.json
//                                     "bos_token_id", else the first token of the post_processor's
//                                     template, else none;
//                                eos: the union, in this order, of tokenizer_config.json "eos_token",
//                                     config.json "eos_token_id" and generation_config.json
//                                     "eos_token_id" (int or list);
//                                pad: tokenizer_config.json "pad_token", else none.
//   else                       io_error naming the directory and both file names.
// Bad content in any of these files is invalid_argument naming the file and the field.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "host/model/tokenizer.h"

namespace kvcomp::host {

std::unique_ptr<tokenizer> load_tokenizer(const std::string & model_dir);

// Parses kvcomp_tokenizer.json text (see above); `source` names the file in messages.
std::unique_ptr<tokenizer> parse_kvcomp_tokenizer(const std::string & json_text,
                                                  const std::string & source = "kvcomp_tokenizer.json");

// Throws invalid_argument when the tokenizer has ids the model cannot embed
// (tokenizer vocab_size > config.json vocab_size). A larger model vocab (padding) is fine.
void check_tokenizer_vocab(const tokenizer & tok, int64_t model_vocab_size);

}  // namespace kvcomp::host
