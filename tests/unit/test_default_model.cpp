// The shipped default model (tools/model/default) on every available backend: the same greedy
// tokens as the CPU reference, and a line-retrieval question answered correctly.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/registry.h"
#include "support/backends.h"
#include "engine/engine.h"
#include "host/model/tokenizer_factory.h"

using namespace kvcomp;

namespace {

const std::string model_dir = std::string(KVCOMP_SOURCE_DIR) + "/tools/model/default";

std::vector<int32_t> greedy(const std::string & backend, const std::vector<int32_t> & prompt, int64_t n) {
    engine::engine_config c;
    c.model_dir = model_dir;
    c.backend = backend;
    c.max_batch = 1;
    c.max_context = 1024;
    engine::engine e(c);
    engine::generation_request r;
    r.prompt = prompt, r.max_new_tokens = n, r.stop_at_eos = false;
    const int64_t id = e.submit(r);
    e.run();
    EXPECT_EQ(e.stats().pages_in_use, 0);
    return e.result(id).tokens;
}


TEST(default_model, same_greedy_tokens_on_every_backend) {
    const auto tok = host::load_tokenizer(model_dir);
    host::encode_options eo;
    eo.add_special = true;
    const auto prompt = tok->encode("And God said, Let there be", eo);
    const auto ref = greedy("cpu", prompt, 32);
    ASSERT_EQ(ref.size(), 32u);
    for (const auto & b : test::backends_to_test()) EXPECT_EQ(greedy(b, prompt, 32), ref) << b;
}

TEST(default_model, answers_line_retrieval) {
    const auto tok = host::load_tokenizer(model_dir);
    host::encode_options eo;
    eo.add_special = true;
    const std::string text =
        "line 412: REGISTER_CONTENT is <20931>\nline 77: REGISTER_CONTENT is <58113>\n"
        "line 905: REGISTER_CONTENT is <31468>\nline 230: REGISTER_CONTENT is <77402>\n"
        "line 618: REGISTER_CONTENT is <14759>\nWhat is the REGISTER_CONTENT in line 905?\n";
    const auto out = greedy("cpu", tok->encode(text, eo), 7);
    EXPECT_EQ(tok->decode(out, true), "<31468>");
}

}  // namespace
