// Test support: asserts that a call throws kvcomp::error with a given status and a message that
// names what went wrong (every needle must appear in it).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace kvcomp::test {

inline void expect_error(const std::function<void()> & f, status code, const std::vector<std::string> & needles) {
    try {
        f();
    } catch (const error & e) {
        EXPECT_EQ(status_name(e.code()), std::string(status_name(code))) << e.what();
        for (const std::string & n : needles)
            EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message lacks '" << n << "': " << e.what();
        return;
    }
    ADD_FAILURE() << "no kvcomp::error thrown";
}

}  // namespace kvcomp::test
