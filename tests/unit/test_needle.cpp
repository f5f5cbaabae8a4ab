// The needle-in-a-haystack generator: deterministic, within the context, the needle at the asked
// depth, the same haystack and needle at every depth, and clear errors on bad input.
#include <gtest/gtest.h>

#include "core/error.h"
#include "host/eval/needle.h"

using namespace kvcomp::host;

namespace {

const std::string k_filler =
    "Ge1:1 In the beginning God created the heaven and the earth.\n"
    "Ge1:2 And the earth was without form, and void; and darkness was upon the face of the deep.\n"
    "\n"
    "Ge1:3 And God said, Let there be light: and there was light.\n";

std::string strip_needle(std::string text, const std::string & answer) {
    const size_t at = text.find("REGISTER_CONTENT is " + answer);
    const size_t begin = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
    return text.erase(begin, text.find('\n', at) + 1 - begin);
}

}  // namespace

TEST(needle, deterministic_fits_and_placed_at_depth) {
    const byte_tokenizer tok;
    for (int64_t ctx : {256, 1024}) {
        const auto a = make_needle(tok, k_filler, ctx, 0.5, 8, 3), b = make_needle(tok, k_filler, ctx, 0.5, 8, 3);
        const auto c = make_needle(tok, k_filler, ctx, 0.5, 8, 4);
        bool differs = false;
        for (size_t i = 0; i < a.size(); ++i) {
            EXPECT_EQ(a[i].prompt, b[i].prompt);
            EXPECT_EQ(a[i].answer, b[i].answer);
            differs = differs || a[i].prompt != c[i].prompt;
            EXPECT_LE(int64_t(a[i].prompt.size() + a[i].answer.size()), ctx);
            EXPECT_GT(int64_t(a[i].prompt.size() + a[i].answer.size()), ctx - 100);  // filled up to ~one line
            EXPECT_EQ(a[i].prompt[0], tok.bos_id());
            const std::string text = tok.decode(a[i].prompt, true);
            const size_t at = text.find(": REGISTER_CONTENT is " + a[i].answer + "\n");
            ASSERT_NE(at, std::string::npos) << text;
            // The question names the needle's key, and the needle sits near the middle.
            const std::string key = text.substr(text.rfind("line ", at) + 5, at - text.rfind("line ", at) - 5);
            EXPECT_NE(text.find("What is the REGISTER_CONTENT in line " + key + "?\n"), std::string::npos);
            // Within about half a filler line (~45 bytes) of the middle.
            const double tol = ctx == 256 ? 0.3 : 0.1;
            EXPECT_NEAR(double(at) / double(text.size()), 0.5, tol);
            EXPECT_NEAR(a[i].depth, 0.5, tol);
        }
        EXPECT_TRUE(differs);
    }
}

TEST(needle, depth_moves_only_the_needle) {
    const byte_tokenizer tok;
    const auto first = make_needle(tok, k_filler, 512, 0.0, 4, 9), last = make_needle(tok, k_filler, 512, 1.0, 4, 9);
    for (size_t i = 0; i < first.size(); ++i) {
        EXPECT_EQ(first[i].answer, last[i].answer);
        EXPECT_EQ(first[i].depth, 0.0);
        EXPECT_EQ(last[i].depth, 1.0);
        const std::string f = tok.decode(first[i].prompt, true), l = tok.decode(last[i].prompt, true);
        EXPECT_EQ(f.rfind("line ", 0), 0u) << f;  // depth 0: the first line
        const size_t q = l.rfind("What is");
        EXPECT_NE(l.rfind("REGISTER_CONTENT is " + last[i].answer + "\n", q), std::string::npos);
        EXPECT_EQ(l.substr(0, q).find("REGISTER_CONTENT is "), l.rfind("REGISTER_CONTENT is ", q));
        EXPECT_EQ(strip_needle(f, first[i].answer), strip_needle(l, last[i].answer));  // same haystack
    }
}

TEST(needle, long_lines_are_broken_and_bad_input_is_an_error) {
    const byte_tokenizer tok;
    std::string one_line;
    for (int i = 0; i < 200; ++i) one_line += "word" + std::to_string(i) + " ";
    const auto ex = make_needle(tok, one_line, 1024, 0.5, 2, 1);
    EXPECT_NEAR(ex[0].depth, 0.5, 0.2);  // a text without newlines still has places to insert at
    EXPECT_THROW(make_needle(tok, k_filler, 1024, 1.5, 1, 1), kvcomp::error);
    EXPECT_THROW(make_needle(tok, k_filler, 1024, -0.1, 1, 1), kvcomp::error);
    EXPECT_THROW(make_needle(tok, " \n\n\t\n", 1024, 0.5, 1, 1), kvcomp::error);
    EXPECT_THROW(make_needle(tok, k_filler, 60, 0.5, 1, 1), kvcomp::error);
    EXPECT_EQ(parse_depths("0,0.25,1", "--depths"), (std::vector<double>{0, 0.25, 1}));
    EXPECT_THROW(parse_depths("0,2", "--depths"), kvcomp::error);
    EXPECT_THROW(parse_depths("0,x", "--depths"), kvcomp::error);
    EXPECT_THROW(parse_depths("", "--depths"), kvcomp::error);
}
