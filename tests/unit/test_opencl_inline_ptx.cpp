// kvcomp::cl::inline_ptx_mma (lib/opencl/nv_mma_probe.cpp) on every OpenCL device listed: NVIDIA's
// driver must compile the inline-PTX mma.sync probe and compute its 16 x 16 by 16 x 8 product
// exactly; any other driver must answer no (the probe is never compiled there) without an error.
// A backend of another API is an invalid argument. Skipped when no OpenCL device is listed.
#ifdef KVCOMP_USE_OPENCL

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/registry.h"
#include "opencl/backend_opencl.h"

namespace {

TEST(OpenCLInlinePtx, answers_on_every_device) {
    int tried = 0;
    for (const auto & d : kvcomp::list_devices()) {
        if (d.info.api != "OpenCL") continue;
        ++tried;
        auto be = d.create();
        const kvcomp::support s = kvcomp::cl::inline_ptx_mma(*be);
        const bool nvidia = d.info.vendor.find("NVIDIA") != std::string::npos ||
                            d.info.platform.find("NVIDIA") != std::string::npos;
        if (nvidia) {
            EXPECT_TRUE(s.ok) << d.info.name << " (" << d.info.device_name << "): " << s.reason;
        } else {
            EXPECT_FALSE(s.ok) << d.info.name;
            EXPECT_NE(s.reason.find("not NVIDIA"), std::string::npos) << s.reason;
        }
    }
    if (tried == 0) GTEST_SKIP() << "no OpenCL device listed";
}

TEST(OpenCLInlinePtx, rejects_other_backends) {
    for (const auto & d : kvcomp::list_devices()) {
        if (d.info.api == "OpenCL") continue;
        auto be = d.create();
        EXPECT_THROW(kvcomp::cl::inline_ptx_mma(*be), kvcomp::error) << d.info.name;
        return;
    }
    GTEST_SKIP() << "no non-OpenCL device listed";
}

}  // namespace

#endif  // KVCOMP_USE_OPENCL
