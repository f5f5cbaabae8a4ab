#include "core/error.h"

#include <new>

namespace kvcomp {

namespace {
thread_local std::string g_last_error;
}

const char * status_name(status s) { return kvcomp_status_name(static_cast<kvcomp_status>(s)); }

void set_last_error(const std::string & message) { g_last_error = message; }

kvcomp_status handle_exception() noexcept {
    try {
        throw;
    } catch (const error & e) {
        g_last_error = e.what();
        return static_cast<kvcomp_status>(e.code());
    } catch (const std::bad_alloc &) {
        g_last_error = "out of host memory";
        return KVCOMP_STATUS_OUT_OF_MEMORY;
    } catch (const std::exception & e) {
        g_last_error = std::string("internal error: ") + e.what();
        return KVCOMP_STATUS_INTERNAL;
    } catch (...) {
        g_last_error = "internal error: unknown exception";
        return KVCOMP_STATUS_INTERNAL;
    }
}

}  // namespace kvcomp

extern "C" const char * kvcomp_status_name(kvcomp_status s) {
    switch (s) {
        case KVCOMP_STATUS_SUCCESS: return "success";
        case KVCOMP_STATUS_INVALID_ARGUMENT: return "invalid argument";
        case KVCOMP_STATUS_UNSUPPORTED: return "unsupported";
        case KVCOMP_STATUS_OUT_OF_MEMORY: return "out of memory";
        case KVCOMP_STATUS_BACKEND_UNAVAILABLE: return "backend unavailable";
        case KVCOMP_STATUS_KERNEL_BUILD_FAILED: return "kernel build failed";
        case KVCOMP_STATUS_DEVICE_ERROR: return "device error";
        case KVCOMP_STATUS_BLAS_ERROR: return "BLAS error";
        case KVCOMP_STATUS_IO_ERROR: return "I/O error";
        case KVCOMP_STATUS_INTERNAL: return "internal error";
    }
    return "unknown status";
}

extern "C" const char * kvcomp_last_error(void) { return kvcomp::g_last_error.c_str(); }
