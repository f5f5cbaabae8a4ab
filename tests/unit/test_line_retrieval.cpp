// The line-retrieval task generator: deterministic, within the context, well-formed.
#include <gtest/gtest.h>

#include "core/error.h"
#include "host/eval/line_retrieval.h"

using namespace kvcomp::host;

TEST(line_retrieval, deterministic_fits_and_well_formed) {
    const byte_tokenizer tok;
    for (int64_t ctx : {256, 1024}) {
        const auto a = make_line_retrieval(tok, ctx, 20, 7), b = make_line_retrieval(tok, ctx, 20, 7);
        const auto c = make_line_retrieval(tok, ctx, 20, 8);
        ASSERT_EQ(a.size(), 20u);
        bool differs = false;
        for (size_t i = 0; i < a.size(); ++i) {
            EXPECT_EQ(a[i].prompt, b[i].prompt);
            differs = differs || a[i].prompt != c[i].prompt;
            EXPECT_LE(int64_t(a[i].prompt.size() + a[i].answer.size()), ctx);
            EXPECT_GT(int64_t(a[i].prompt.size() + a[i].answer.size()), ctx - 60);  // filled up to ~one line
            EXPECT_EQ(a[i].prompt[0], tok.bos_id());
            const std::string text = tok.decode(a[i].prompt, true);
            // The asked value appears in the record exactly on the asked line.
            const std::string needle = "REGISTER_CONTENT is " + a[i].answer + "\n";
            EXPECT_NE(text.find(needle), std::string::npos) << text;
            EXPECT_EQ(text.substr(text.size() - 1), "\n");
            EXPECT_EQ(a[i].answer.size(), 7u);
        }
        EXPECT_TRUE(differs);
    }
    EXPECT_THROW(make_line_retrieval(tok, 40, 1, 1), kvcomp::error);
}
