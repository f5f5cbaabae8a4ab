// Errors inside kvcomp: one exception type carrying a public status code.
//
// Library code throws kvcomp::error; the public API catches it (KVCOMP_API_BEGIN/END) and
// returns the status, keeping the message for kvcomp_last_error(). Native-call checkers of the
// backends (KVCOMP_CL_CHECK, KVCOMP_CUDA_CHECK, ...) are built on KVCOMP_CHECK_GEN so every
// native failure reports the statement, the file and line, and the vendor's error string.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "kvcomp/status.h"

namespace kvcomp {

enum class status {
    success = KVCOMP_STATUS_SUCCESS,
    invalid_argument = KVCOMP_STATUS_INVALID_ARGUMENT,
    unsupported = KVCOMP_STATUS_UNSUPPORTED,
    out_of_memory = KVCOMP_STATUS_OUT_OF_MEMORY,
    backend_unavailable = KVCOMP_STATUS_BACKEND_UNAVAILABLE,
    kernel_build_failed = KVCOMP_STATUS_KERNEL_BUILD_FAILED,
    device_error = KVCOMP_STATUS_DEVICE_ERROR,
    blas_error = KVCOMP_STATUS_BLAS_ERROR,
    io_error = KVCOMP_STATUS_IO_ERROR,
    internal = KVCOMP_STATUS_INTERNAL,
};

const char * status_name(status s);

class error : public std::runtime_error {
public:
    error(status code, const std::string & message) : std::runtime_error(message), code_(code) {}
    status code() const { return code_; }

private:
    status code_;
};

// Builds a message from any streamable arguments: KVCOMP_THROW(status::invalid_argument, "n=", n).
template <typename... Args>
std::string concat(const Args &... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

// Public-API boundary helpers: remember the message for kvcomp_last_error() and map any
// exception to a status.
void set_last_error(const std::string & message);
kvcomp_status handle_exception() noexcept;  // call only inside a catch block

}  // namespace kvcomp

#define KVCOMP_THROW(code, ...) throw ::kvcomp::error((code), ::kvcomp::concat(__VA_ARGS__))

// Argument check: throws invalid_argument with the streamed message when cond is false.
#define KVCOMP_CHECK_ARG(cond, ...)                                          \
    do {                                                                     \
        if (!(cond)) KVCOMP_THROW(::kvcomp::status::invalid_argument, __VA_ARGS__); \
    } while (0)

// Broken invariant (a bug in kvcomp, not user input): throws internal, never aborts.
#define KVCOMP_ASSERT(cond)                                                                     \
    do {                                                                                        \
        if (!(cond))                                                                            \
            KVCOMP_THROW(::kvcomp::status::internal, "internal error: ", #cond, " at ", __FILE__, \
                         ":", __LINE__);                                                        \
    } while (0)

// Generic native-call checker: evaluates expr once, compares with ok, and throws code with the
// statement, location and to_string(result).
#define KVCOMP_CHECK_GEN(expr, ok, to_string, code)                                              \
    do {                                                                                         \
        auto kvcomp_check_result_ = (expr);                                                      \
        if (kvcomp_check_result_ != (ok))                                                        \
            KVCOMP_THROW((code), #expr, " failed: ", to_string(kvcomp_check_result_), " (",      \
                         __FILE__, ":", __LINE__, ")");                                           \
    } while (0)

#define KVCOMP_API_BEGIN try {
#define KVCOMP_API_END                             \
    }                                              \
    catch (...) {                                  \
        return ::kvcomp::handle_exception();       \
    }                                              \
    return KVCOMP_STATUS_SUCCESS;
