// Harness of test_backend_ops and bench_ops: generators, host tensors, device placement with
// guards, the backend-vs-reference comparison and the perf timer loop.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <sstream>
#include <thread>

#include "backend_ops_cases.h"

namespace kvcomp::test {

// ---------------------------------------------------------------------------------------------
// Generators and host tensors.

uint64_t test_rng::next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double test_rng::uniform() {
    return double(next() >> 11) * (1.0 / 9007199254740992.0);
}

int64_t test_rng::below(int64_t n) {
    return n <= 1 ? 0 : int64_t(next() % uint64_t(n));
}

float test_rng::normal() {
    if (have_spare_) {
        have_spare_ = false;
        return spare_;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = float(r * std::sin(2.0 * M_PI * u2));
    have_spare_ = true;
    return float(r * std::cos(2.0 * M_PI * u2));
}

uint64_t hash_string(const std::string & s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

int64_t host_tensor::numel() const {
    if (shape.empty()) return 0;  // absent optional operand
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

namespace {

constexpr uint32_t poison_f32 = 0x7fa5a5a5u;  // NaN
constexpr uint16_t poison_f16 = 0x7ea5u;      // NaN
constexpr uint16_t poison_bf16 = 0x7fa5u;     // NaN
constexpr uint32_t poison_i32 = 0xa5a5a5a5u;  // negative: never a valid index or id
constexpr uint8_t guard_byte = 0xa5;

void poison_tensor(host_tensor & t) {
    const int64_t n = t.numel();
    switch (t.type) {
        case dtype::f32:
        case dtype::i32: {
            const uint32_t v = t.type == dtype::f32 ? poison_f32 : poison_i32;
            std::fill(t.as<uint32_t>(), t.as<uint32_t>() + n, v);
            break;
        }
        case dtype::f16:
            std::fill(t.as<uint16_t>(), t.as<uint16_t>() + n, poison_f16);
            break;
        case dtype::bf16:
            std::fill(t.as<uint16_t>(), t.as<uint16_t>() + n, poison_bf16);
            break;
        case dtype::u8:
            std::fill(t.data.begin(), t.data.end(), guard_byte);
            break;
    }
}

}  // namespace

bool is_poison(const host_tensor & t, int64_t i) {
    const uint8_t * p = t.data.data();
    switch (t.type) {
        case dtype::f32:
            return reinterpret_cast<const uint32_t *>(p)[i] == poison_f32;
        case dtype::i32:
            return reinterpret_cast<const uint32_t *>(p)[i] == poison_i32;
        case dtype::f16:
            return reinterpret_cast<const uint16_t *>(p)[i] == poison_f16;
        case dtype::bf16:
            return reinterpret_cast<const uint16_t *>(p)[i] == poison_bf16;
        case dtype::u8:
            return p[i] == guard_byte;
    }
    return false;
}

void set_float(host_tensor & t, int64_t i, float v) {
    switch (t.type) {
        case dtype::f32:
            t.as<float>()[i] = v;
            return;
        case dtype::f16:
            t.as<uint16_t>()[i] = float_to_half(v);
            return;
        case dtype::bf16:
            t.as<uint16_t>()[i] = float_to_bf16(v);
            return;
        case dtype::i32:
            t.as<int32_t>()[i] = int32_t(v);
            return;
        case dtype::u8:
            t.data[size_t(i)] = uint8_t(v);
            return;
    }
}

float get_float(const host_tensor & t, int64_t i) {
    const uint8_t * p = t.data.data();
    switch (t.type) {
        case dtype::f32:
            return reinterpret_cast<const float *>(p)[i];
        case dtype::f16:
            return half_to_float(reinterpret_cast<const uint16_t *>(p)[i]);
        case dtype::bf16:
            return bf16_to_float(reinterpret_cast<const uint16_t *>(p)[i]);
        case dtype::i32:
            return float(reinterpret_cast<const int32_t *>(p)[i]);
        case dtype::u8:
            return float(p[i]);
    }
    return 0.0f;
}

void for_each_seeded(int64_t n_items, test_rng & rng, const std::function<void(int64_t, test_rng &)> & fn) {
    std::vector<uint64_t> seeds(static_cast<size_t>(n_items));
    for (auto & s : seeds) s = rng.next();
    auto work = [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            test_rng local(seeds[size_t(i)]);
            fn(i, local);
        }
    };
    const int64_t n_threads = std::min<int64_t>(n_items, std::max(1u, std::thread::hardware_concurrency()));
    if (n_threads <= 1) return work(0, n_items);
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < n_threads; ++w)
        pool.emplace_back(work, n_items * w / n_threads, n_items * (w + 1) / n_threads);
    for (auto & th : pool) th.join();
}

void fill_normal(host_tensor & t, test_rng & rng, float scale) {
    // Fixed 1M-element chunks, each with its own seed drawn from rng: the result does not depend
    // on the number of threads, and multi-GiB KV pools for bench_ops fill in seconds.
    constexpr int64_t chunk = int64_t(1) << 20;
    const int64_t n = t.numel();
    for_each_seeded((n + chunk - 1) / chunk, rng, [&](int64_t c, test_rng & local) {
        for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) set_float(t, i, scale * local.normal());
    });
}

// ---------------------------------------------------------------------------------------------
// test_case base.

host_tensor & test_case::add_tensor(const std::string & name, dtype type, std::vector<int64_t> shape,
                                    tensor_role role, compare_kind cmp) {
    host_tensor t;
    t.name = name;
    t.type = type;
    t.shape = std::move(shape);
    t.role = role;
    t.cmp = cmp;
    tensors_.push_back(std::move(t));
    return tensors_.back();
}

host_tensor & test_case::tensor_named(const std::string & name) {
    for (auto & t : tensors_)
        if (t.name == name) return t;
    KVCOMP_THROW(status::internal, "test case ", this->name(), " has no tensor ", name);
}

void test_case::prepare(test_rng & rng) {
    for (auto & t : tensors_) {
        t.data.assign(t.nbytes(), 0);
        if (t.role == tensor_role::output) poison_tensor(t);
    }
    init(rng);
}

uint64_t test_case::bytes() const {
    uint64_t b = 0;
    for (const auto & t : tensors_) b += t.nbytes() * (t.role == tensor_role::inout ? 2 : 1);
    return b;
}

uint64_t test_case::device_bytes() const {
    uint64_t b = 0;
    for (const auto & t : tensors_) b += t.nbytes() + 2 * pad_bytes_;
    return b;
}

// ---------------------------------------------------------------------------------------------
// Page tables.

int64_t pages_needed(const std::vector<int64_t> & lens, int64_t page_size) {
    int64_t n = 0;
    for (int64_t l : lens) n += (l + page_size - 1) / page_size;
    return n;
}

page_table_arrays build_page_table(const std::vector<int64_t> & lens, int64_t page_size, int64_t n_pages,
                                   test_rng & rng, bool shuffle) {
    const int64_t need = pages_needed(lens, page_size);
    KVCOMP_CHECK_ARG(need <= n_pages, "build_page_table: ", need, " pages needed, pool has ", n_pages);
    std::vector<int32_t> perm(static_cast<size_t>(n_pages));
    std::iota(perm.begin(), perm.end(), 0);
    if (shuffle)
        for (int64_t i = n_pages - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(rng.below(i + 1))]);
    page_table_arrays pt;
    pt.indptr.push_back(0);
    size_t next = 0;
    for (int64_t l : lens) {
        const int64_t np = (l + page_size - 1) / page_size;
        for (int64_t i = 0; i < np; ++i) pt.indices.push_back(perm[next++]);
        pt.indptr.push_back(int32_t(pt.indices.size()));
        pt.last_page_len.push_back(int32_t(l == 0 ? 0 : l - (np - 1) * page_size));
        pt.max_seq_len = std::max(pt.max_seq_len, l);
    }
    return pt;
}

// ---------------------------------------------------------------------------------------------
// Device placement: one buffer per tensor, [guard | view | guard].

namespace {

struct device_tensors {
    std::vector<buffer_ptr> bufs;
    std::vector<tensor> views;
};

tensor view_of(buffer * buf, const host_tensor & t, size_t offset) {
    tensor v;
    v.buf = buf;
    v.offset = offset;
    v.type = t.type;
    v.ndim = int(std::max<size_t>(1, t.shape.size()));
    for (size_t i = 0; i < t.shape.size() && i < 4; ++i) v.shape[i] = t.shape[i];
    return v;
}

// upload=false: allocate only (contents undefined), for support queries.
device_tensors place(const test_case & tc, backend & be, bool upload) {
    device_tensors d;
    const size_t pad = tc.pad_bytes();
    std::vector<uint8_t> guard(pad, guard_byte);
    for (const auto & t : tc.tensors()) {
        if (t.shape.empty()) {  // absent optional operand
            d.bufs.push_back(nullptr);
            d.views.push_back(tensor{});
            continue;
        }
        buffer_ptr b = be.alloc(t.nbytes() + 2 * pad);
        if (upload) {
            be.upload(*b, 0, guard.data(), pad);
            if (t.nbytes()) be.upload(*b, pad, t.data.data(), t.nbytes());
            be.upload(*b, pad + t.nbytes(), guard.data(), pad);
        }
        d.views.push_back(view_of(b.get(), t, pad));
        d.bufs.push_back(std::move(b));
    }
    return d;
}

std::string fmt(double v) {
    std::ostringstream os;
    os.precision(2);
    os << v;
    return os.str();
}

// Downloads tensor i (with its guards) into `out` (a copy of the host tensor) and checks the guards.
std::string fetch(backend & be, const device_tensors & d, size_t i, const test_case & tc, host_tensor & out,
                  const char * who) {
    const size_t pad = tc.pad_bytes();
    std::vector<uint8_t> all(out.nbytes() + 2 * pad);
    be.download(*d.bufs[i], 0, all.data(), all.size());
    for (size_t j = 0; j < all.size(); ++j) {
        if (j == pad) j = pad + out.nbytes();
        if (j < all.size() && all[j] != guard_byte)
            return std::string(who) + " wrote outside tensor " + out.name + " (guard byte " +
                   std::to_string(long(j) - long(pad)) + " relative to the view)";
    }
    std::memcpy(out.data.data(), all.data() + pad, out.nbytes());
    return "";
}

// Compares one output. ref/got are downloaded copies; init is the host tensor before the run.
std::string compare_tensor(const host_tensor & init, const host_tensor & ref, const host_tensor & got,
                           double max_nmse, double & nmse_out, const std::string & target_name) {
    const int64_t n = ref.numel();
    const size_t es = dtype_size(ref.type);
    if (init.role == tensor_role::output) {
        int64_t written = 0;
        for (int64_t i = 0; i < n; ++i) written += is_poison(ref, i) ? 0 : 1;
        const int64_t expect = init.expect_written < 0 ? n : init.expect_written;
        if (written != expect)
            return "reference (cpu) wrote " + std::to_string(written) + " elements of " + ref.name +
                   ", expected " + std::to_string(expect) + ": the oracle itself is wrong";
        for (int64_t i = 0; i < n; ++i) {
            const bool rp = is_poison(ref, i), gp = is_poison(got, i);
            if (!rp && gp) return target_name + " did not write " + ref.name + "[" + std::to_string(i) + "]";
            if (rp && std::memcmp(ref.data.data() + i * es, got.data.data() + i * es, es) != 0)
                return target_name + " wrote " + ref.name + "[" + std::to_string(i) +
                       "] (= " + fmt(get_float(got, i)) + "), which the reference leaves untouched";
        }
    }
    if (ref.cmp == compare_kind::exact) {
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; ++i)
            if (std::memcmp(ref.data.data() + i * es, got.data.data() + i * es, es) != 0) {
                if (first < 0) first = i;
                ++bad;
            }
        if (bad)
            return ref.name + ": " + std::to_string(bad) + " of " + std::to_string(n) +
                   " elements differ, first [" + std::to_string(first) + "] " + fmt(get_float(got, first)) +
                   " vs " + fmt(get_float(ref, first));
        nmse_out = std::max(nmse_out, 0.0);
        return "";
    }
    double err = 0.0, sig = 0.0;
    int64_t worst = -1;
    double worst_d = -1.0;
    for (int64_t i = 0; i < n; ++i) {
        if (init.role == tensor_role::output && is_poison(ref, i)) continue;  // untouched by contract
        const double a = get_float(got, i), b = get_float(ref, i);
        const double d = (a - b) * (a - b);
        if (!(d <= worst_d)) {  // NaN counts as worst
            worst_d = d;
            worst = i;
        }
        err += d;
        sig += b * b;
    }
    const double nmse = sig > 0.0 ? err / sig : err;
    if (!(nmse <= max_nmse)) {
        std::string w;
        if (worst >= 0)
            w = ", worst [" + std::to_string(worst) + "] " + fmt(get_float(got, worst)) + " vs " +
                fmt(get_float(ref, worst));
        return ref.name + ": nmse=" + fmt(nmse) + " > " + fmt(max_nmse) + w;
    }
    nmse_out = std::max(nmse_out, nmse);
    return "";
}

}  // namespace

support case_support(test_case & tc, backend & be) {
    for (auto & t : tc.tensors()) t.data.assign(t.nbytes(), 0);
    device_tensors d = place(tc, be, false);
    const op_desc op = tc.build(d.views);
    check_op(op);
    return be.supports(op);
}

void run_case(test_case & tc, backend & be, uint64_t seed) {
    test_rng rng(seed ^ hash_string(tc.name()));
    tc.prepare(rng);
    device_tensors d = place(tc, be, true);
    be.run(tc.build(d.views));
    be.synchronize();
}

compare_result compare_backends(test_case & tc, backend & target, backend & reference, uint64_t seed) {
    compare_result res;
    test_rng rng(seed ^ hash_string(tc.name()));
    tc.prepare(rng);
    device_tensors dt = place(tc, target, true);
    const op_desc op_t = tc.build(dt.views);
    check_op(op_t);  // a malformed case is a bug in this file: let the error propagate
    const support s = target.supports(op_t);
    if (!s.ok) {
        // The generic run() path must refuse it the same way.
        res.result = compare_result::outcome::unsupported;
        res.detail = s.reason;
        try {
            target.run(op_t);
            res.result = compare_result::outcome::fail;
            res.detail = "supports() says no (" + s.reason + ") but run() accepted the op";
        } catch (const error & e) {
            if (e.code() != status::unsupported) {
                res.result = compare_result::outcome::fail;
                res.detail = std::string("run() of an unsupported op threw ") + status_name(e.code()) + ": " +
                             e.what();
            }
        }
        return res;
    }
    device_tensors dr = place(tc, reference, true);
    reference.run(tc.build(dr.views));
    target.run(op_t);
    reference.synchronize();
    target.synchronize();

    double nmse = 0.0;
    bool any_nmse = false;
    for (size_t i = 0; i < tc.tensors().size(); ++i) {
        const host_tensor & init = tc.tensors()[i];
        if (init.shape.empty()) continue;
        host_tensor ref = init, got = init;
        std::string err = fetch(reference, dr, i, tc, ref, "reference (cpu)");
        if (err.empty()) err = fetch(target, dt, i, tc, got, target.name().c_str());
        if (err.empty() && init.role == tensor_role::input &&
            (got.data != init.data || ref.data != init.data))
            err = (got.data != init.data ? target.name() : std::string("reference (cpu)")) +
                  " modified input " + init.name;
        if (err.empty() && init.role != tensor_role::input) {
            err = compare_tensor(init, ref, got, tc.max_nmse(), nmse, target.name());
            any_nmse = any_nmse || init.cmp == compare_kind::nmse;
        }
        if (!err.empty()) {
            res.result = compare_result::outcome::fail;
            res.detail = err;
            return res;
        }
    }
    res.detail = any_nmse ? "nmse=" + fmt(nmse) + " <= " + fmt(tc.max_nmse()) : "bit-exact";
    return res;
}

cache_flush::cache_flush(backend & be, int64_t mib, uint64_t seed)
    : be_(be), copy_(make_copy_case(dtype::f32, dtype::f32, mib * (int64_t(1) << 20) / 4)) {
    test_rng rng(seed);
    copy_->prepare(rng);
    device_tensors d = place(*copy_, be, false);  // what it copies does not matter
    copy_->release_host();
    op_ = copy_->build(d.views);
    bufs_ = std::move(d.bufs);
}

cache_flush::~cache_flush() = default;

void cache_flush::enqueue() {
    be_.run(op_);
}

perf_result time_case(test_case & tc, backend & be, int warmup, int reps, uint64_t seed, cache_flush * cold) {
    perf_result r;
    test_rng rng(seed ^ hash_string(tc.name()));
    tc.prepare(rng);
    device_tensors d = place(tc, be, true);
    be.synchronize();
    tc.release_host();  // bench decode pools are GiBs; the device copy is all we need now
    const op_desc op = tc.build(d.views);
    check_op(op);
    const support s = be.supports(op);
    if (!s.ok) {
        r.supported = false;
        r.reason = s.reason;
        return r;
    }
    for (int i = 0; i < warmup; ++i) be.run(op);
    be.synchronize();
    std::vector<double> ms;
    for (int i = 0; i < std::max(1, reps); ++i) {
        if (cold) cold->enqueue();
        be.timer_start();
        be.run(op);
        ms.push_back(be.timer_stop_ms());
    }
    std::sort(ms.begin(), ms.end());
    r.reps = int(ms.size());
    r.min_ms = ms.front();
    r.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    if (r.median_ms > 0.0) {
        r.gbps = double(tc.bytes()) / (r.median_ms * 1e-3) / 1e9;
        r.gflops = double(tc.flops()) / (r.median_ms * 1e-3) / 1e9;
    }
    return r;
}

}  // namespace kvcomp::test
