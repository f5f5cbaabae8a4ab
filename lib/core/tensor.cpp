#include "core/tensor.h"

#include <sstream>

#include "core/error.h"

namespace kvcomp {

const char * dtype_name(dtype t) {
    switch (t) {
        case dtype::f32: return "f32";
        case dtype::f16: return "f16";
        case dtype::bf16: return "bf16";
        case dtype::i32: return "i32";
        case dtype::u8: return "u8";
    }
    return "?";
}

std::string describe(const tensor & t) {
    if (!t.valid()) return "none";
    std::ostringstream os;
    os << dtype_name(t.type) << '[';
    for (int i = 0; i < t.ndim; ++i) os << (i ? "," : "") << t.shape[size_t(i)];
    os << ']';
    return os.str();
}

tensor make_tensor(buffer * buf, dtype type, std::initializer_list<int64_t> shape, size_t offset) {
    KVCOMP_CHECK_ARG(shape.size() >= 1 && shape.size() <= 4, "make_tensor: 1 to 4 axes, got ", shape.size());
    tensor t;
    t.buf = buf;
    t.offset = offset;
    t.type = type;
    t.ndim = int(shape.size());
    size_t i = 0;
    for (int64_t d : shape) {
        KVCOMP_CHECK_ARG(d >= 0, "make_tensor: negative extent ", d);
        t.shape[i++] = d;
    }
    return t;
}

}  // namespace kvcomp
