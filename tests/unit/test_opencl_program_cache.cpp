// OpenCL program cache: compile errors carry the build log, repeated lookups do not recompile (in
// memory, and through the disk cache as a new process would), broken cache files are rebuilt, and
// backends on one device share programs. Skipped when no OpenCL device is listed.
#ifdef KVCOMP_USE_OPENCL

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/registry.h"
#include "opencl/backend_opencl.h"

namespace {

namespace fs = std::filesystem;
using kvcomp::cl::program_cache_stats;

std::unique_ptr<kvcomp::backend> make_opencl_backend() {
    for (const auto & d : kvcomp::list_devices())
        if (d.info.api == "OpenCL") return d.create();
    return nullptr;
}

// A kernel whose text is new to every cache (so the first lookup must really compile).
std::string unique_kernel() {
    std::random_device rd;
    const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
    return "// nonce " + std::to_string(rd()) + "-" + std::to_string(t) +
           "\nkernel void kvc_scale2(global float * x) { x[get_global_id(0)] *= 2.0f; }\n";
}

std::vector<fs::path> cache_files(const fs::path & dir) {
    std::vector<fs::path> out;
    for (const auto & e : fs::directory_iterator(dir))
        if (e.path().extension() == ".clbin") out.push_back(e.path());
    return out;
}

class OpenCLProgramCache : public ::testing::Test {
  protected:
    void SetUp() override {
        be_ = make_opencl_backend();
        if (!be_) GTEST_SKIP() << "no OpenCL device listed";
        saved_dir_ = kvcomp::cl::disk_cache_dir();
        std::random_device rd;
        dir_ = fs::temp_directory_path() / ("kvcomp_cl_cache_test_" + std::to_string(rd()));
        fs::create_directories(dir_);
        kvcomp::cl::set_disk_cache_dir(dir_.string());
    }
    void TearDown() override {
        if (!be_) return;
        kvcomp::cl::set_disk_cache_dir(saved_dir_);
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }

    std::unique_ptr<kvcomp::backend> be_;
    std::string saved_dir_;
    fs::path dir_;
};

TEST_F(OpenCLProgramCache, BrokenKernelReportsBuildLog) {
    const std::string src =
        unique_kernel() + "kernel void kvc_broken(global float * x) { x[0] = no_such_symbol; }\n";
    try {
        kvcomp::cl::compile_for_test(*be_, src, "broken_for_test.cl");
        FAIL() << "a kernel with an undeclared identifier compiled";
    } catch (const kvcomp::error & e) {
        EXPECT_EQ(e.code(), kvcomp::status::kernel_build_failed);
        const std::string msg = e.what();
        EXPECT_NE(msg.find("broken_for_test.cl"), std::string::npos) << msg;
        EXPECT_NE(msg.find("-cl-std=CL1.2"), std::string::npos) << msg;   // the options
        EXPECT_NE(msg.find("no_such_symbol"), std::string::npos) << msg;  // from CL_PROGRAM_BUILD_LOG
    }
    // A failed build is not cached: the same source fails again, with the log again.
    EXPECT_THROW(kvcomp::cl::compile_for_test(*be_, src, "broken_for_test.cl"), kvcomp::error);
}

TEST_F(OpenCLProgramCache, SecondLookupHitsMemory) {
    const std::string src = unique_kernel();
    const program_cache_stats s0 = kvcomp::cl::cache_stats(*be_);
    kvcomp::cl::compile_for_test(*be_, src);
    const program_cache_stats s1 = kvcomp::cl::cache_stats(*be_);
    EXPECT_EQ(s1.builds, s0.builds + 1);
    kvcomp::cl::compile_for_test(*be_, src);
    const program_cache_stats s2 = kvcomp::cl::cache_stats(*be_);
    EXPECT_EQ(s2.builds, s1.builds);
    EXPECT_EQ(s2.memory_hits, s1.memory_hits + 1);

    // A second backend on the same device shares the context and its programs.
    auto other = make_opencl_backend();
    ASSERT_TRUE(other);
    kvcomp::cl::compile_for_test(*other, src);
    const program_cache_stats s3 = kvcomp::cl::cache_stats(*other);
    EXPECT_EQ(s3.builds, s2.builds);
    EXPECT_EQ(s3.memory_hits, s2.memory_hits + 1);
}

TEST_F(OpenCLProgramCache, DiskCacheServesAFreshProcess) {
    const std::string src = unique_kernel();
    const program_cache_stats s0 = kvcomp::cl::cache_stats(*be_);
    kvcomp::cl::compile_for_test(*be_, src);
    ASSERT_EQ(cache_files(dir_).size(), 1u) << "the build did not write a cache file in " << dir_;
    const program_cache_stats s1 = kvcomp::cl::cache_stats(*be_);
    EXPECT_EQ(s1.builds, s0.builds + 1);
    EXPECT_EQ(s1.disk_write_failures, s0.disk_write_failures);

    // Dropping the in-memory programs is what a new process sees: the binary must be reused.
    kvcomp::cl::clear_memory_cache(*be_);
    kvcomp::cl::compile_for_test(*be_, src);
    const program_cache_stats s2 = kvcomp::cl::cache_stats(*be_);
    EXPECT_EQ(s2.builds, s1.builds) << "recompiled although the disk cache held the program";
    EXPECT_EQ(s2.disk_loads, s1.disk_loads + 1);
    EXPECT_EQ(s2.disk_rejects, s1.disk_rejects);
}

TEST_F(OpenCLProgramCache, CorruptCacheFileIsRebuiltNotFatal) {
    const std::string src = unique_kernel();
    kvcomp::cl::compile_for_test(*be_, src);
    const auto files = cache_files(dir_);
    ASSERT_EQ(files.size(), 1u);
    const auto size = fs::file_size(files[0]);

    // Truncated file (e.g. a crash on a filesystem without atomic rename).
    fs::resize_file(files[0], size / 2);
    kvcomp::cl::clear_memory_cache(*be_);
    const program_cache_stats s0 = kvcomp::cl::cache_stats(*be_);
    EXPECT_NO_THROW(kvcomp::cl::compile_for_test(*be_, src));
    const program_cache_stats s1 = kvcomp::cl::cache_stats(*be_);
    EXPECT_EQ(s1.disk_rejects, s0.disk_rejects + 1);
    EXPECT_EQ(s1.builds, s0.builds + 1);
    EXPECT_EQ(fs::file_size(files[0]), size) << "the rebuilt program was not written back";

    // Same size, flipped bytes inside the binary: the checksum must catch it.
    {
        std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(std::streamoff(size - 8));
        const char junk[8] = {'j', 'u', 'n', 'k', 'j', 'u', 'n', 'k'};
        f.write(junk, sizeof(junk));
    }
    kvcomp::cl::clear_memory_cache(*be_);
    EXPECT_NO_THROW(kvcomp::cl::compile_for_test(*be_, src));
    const program_cache_stats s2 = kvcomp::cl::cache_stats(*be_);
    EXPECT_EQ(s2.disk_rejects, s1.disk_rejects + 1);
    EXPECT_EQ(s2.builds, s1.builds + 1);

    // A file from another program under this name (a foreign or colliding key) is rejected too.
    const std::string other = unique_kernel();
    kvcomp::cl::compile_for_test(*be_, other);
    auto now = cache_files(dir_);
    ASSERT_EQ(now.size(), 2u);
    const fs::path other_file = now[0] == files[0] ? now[1] : now[0];
    fs::copy_file(other_file, files[0], fs::copy_options::overwrite_existing);
    kvcomp::cl::clear_memory_cache(*be_);
    EXPECT_NO_THROW(kvcomp::cl::compile_for_test(*be_, src));
    const program_cache_stats s3 = kvcomp::cl::cache_stats(*be_);
    EXPECT_EQ(s3.disk_rejects, s2.disk_rejects + 1);

    // After the rebuild the file is valid again.
    kvcomp::cl::clear_memory_cache(*be_);
    kvcomp::cl::compile_for_test(*be_, src);
    EXPECT_EQ(kvcomp::cl::cache_stats(*be_).disk_loads, s3.disk_loads + 1);
}

TEST_F(OpenCLProgramCache, DisabledDiskCacheWritesNothing) {
    kvcomp::cl::set_disk_cache_dir("off");
    EXPECT_EQ(kvcomp::cl::disk_cache_dir(), "");
    kvcomp::cl::compile_for_test(*be_, unique_kernel());
    EXPECT_TRUE(cache_files(dir_).empty());
}

TEST_F(OpenCLProgramCache, OpsStillRunAfterMemoryCacheIsDropped) {
    // Kernels created before clear_memory_cache keep their programs alive.
    std::vector<float> x = {1.0f, -2.0f, 3.5f, 65504.0f, 1e-8f};
    auto src = kvcomp::upload_vector(*be_, x);
    auto dst = be_->alloc(x.size() * 2);
    const auto op =
        kvcomp::make_op(kvcomp::copy_params{int64_t(x.size())},
                        {kvcomp::make_tensor(src.get(), kvcomp::dtype::f32, {int64_t(x.size())})},
                        {kvcomp::make_tensor(dst.get(), kvcomp::dtype::f16, {int64_t(x.size())})});
    be_->timer_start();
    be_->run(op);
    const double ms = be_->timer_stop_ms();
    EXPECT_GE(ms, 0.0);
    kvcomp::cl::clear_memory_cache(*be_);
    be_->run(op);
    std::vector<uint16_t> h(x.size());
    be_->download(*dst, 0, h.data(), h.size() * 2);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(h[i], kvcomp::float_to_half(x[i])) << i;
}

}  // namespace

#endif  // KVCOMP_USE_OPENCL
