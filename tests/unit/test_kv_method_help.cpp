// kvcomp methods' text (engine/kv_method_help.cpp) against the option parsers: every registered
// method has a description, every option a parser accepts is listed in it as KEY=..., and every
// KEY= it lists is accepted (a parser rejects an unknown key listing the ones it reads; a known key
// with a bad value fails on the value, not as unknown).
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "engine/kv_method.h"
#include "support/expect_error.h"

using namespace kvcomp;

namespace {

// The keys a method's parser reads, from its message for an unknown key: "(options: a, b, c)".
std::set<std::string> accepted_keys(const std::string & method) {
    try {
        engine::create_kv_method(method, {{"no_such_option", "1"}});
    } catch (const std::exception & e) {
        const std::string msg = e.what();
        std::set<std::string> keys;
        const auto at = msg.find("(options: ");
        if (at == std::string::npos) return keys;
        const std::string list = msg.substr(at + 10, msg.find(')', at) - at - 10);
        const std::regex word("[a-z_]+");
        for (auto it = std::sregex_iterator(list.begin(), list.end(), word); it != std::sregex_iterator(); ++it)
            keys.insert(it->str());
        return keys;
    }
    ADD_FAILURE() << method << " accepted an unknown option";
    return {};
}

std::set<std::string> listed_keys(const std::string & help) {
    std::set<std::string> keys;
    const std::regex key("([a-z_]+)=");
    for (auto it = std::sregex_iterator(help.begin(), help.end(), key); it != std::sregex_iterator(); ++it)
        keys.insert((*it)[1].str());
    return keys;
}

TEST(kv_method_help, lists_exactly_the_options_each_parser_takes) {
    for (const std::string & m : engine::kv_method_names()) {
        const std::string help = engine::kv_method_help(m);
        EXPECT_EQ(help.rfind(m + ": ", 0), 0u) << help;
        const std::set<std::string> listed = listed_keys(help);
        if (m == "none") {
            EXPECT_TRUE(listed.empty()) << help;
            continue;
        }
        if (m == "window") {  // its one option has its own message
            EXPECT_EQ(listed, std::set<std::string>{"window"});
            continue;
        }
        const std::set<std::string> accepted = accepted_keys(m);
        ASSERT_FALSE(accepted.empty()) << m;
        for (const auto & k : accepted) EXPECT_TRUE(listed.count(k)) << m << ": option " << k << " is not listed";
        for (const auto & k : listed) EXPECT_TRUE(accepted.count(k)) << m << ": listed " << k << " is not accepted";
    }
}

TEST(kv_method_help, unknown_method_names_the_valid_ones) {
    test::expect_error([] { engine::kv_method_help("h2o"); }, status::invalid_argument, {"h2o", "zipcache", "palu"});
}

}  // namespace
