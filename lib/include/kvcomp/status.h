// Public status codes of kvcomp.
//
// Every function of the public API returns a kvcomp_status. On anything other than
// KVCOMP_STATUS_SUCCESS, kvcomp_last_error() returns a message for the calling thread that names
// the operation, its parameters and the offending value, e.g.
//   "gemm(m=3,n=5,k=7,trans_b=1): B has 30 elements, expected 35".
// The library never aborts on user input: exceptions are caught at the API boundary and turned
// into one of these codes.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvcomp_status {
    KVCOMP_STATUS_SUCCESS = 0,
    KVCOMP_STATUS_INVALID_ARGUMENT = 1,    // a bad option, shape, file or name from the caller
    KVCOMP_STATUS_UNSUPPORTED = 2,         // op, dtype or shape not supported by this backend
    KVCOMP_STATUS_OUT_OF_MEMORY = 3,       // device allocation or page pool exhausted
    KVCOMP_STATUS_BACKEND_UNAVAILABLE = 4, // backend not compiled in, or no such device
    KVCOMP_STATUS_KERNEL_BUILD_FAILED = 5, // OpenCL program build failed (message has the log)
    KVCOMP_STATUS_DEVICE_ERROR = 6,        // a native OpenCL or CUDA call failed
    KVCOMP_STATUS_BLAS_ERROR = 7,          // CLBlast or cuBLAS failed
    KVCOMP_STATUS_IO_ERROR = 8,            // a file could not be read or written
    KVCOMP_STATUS_INTERNAL = 9             // a broken invariant: a bug in kvcomp
} kvcomp_status;

// Short name of a status ("unsupported", ...). Never NULL.
const char * kvcomp_status_name(kvcomp_status s);

// Message of the last failed call on this thread ("" if none). Valid until the next failing call.
const char * kvcomp_last_error(void);

#ifdef __cplusplus
}
#endif
