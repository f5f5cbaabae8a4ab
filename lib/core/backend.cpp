#include "core/backend.h"

#include <algorithm>

namespace kvcomp {

void backend::run(const op_desc & op) {
    check_op(op);
    for (const tensor & t : op.src)
        if (t.valid())
            KVCOMP_CHECK_ARG(&t.buf->owner() == this, describe(op), ": a source buffer belongs to backend ",
                             t.buf->owner().name(), ", not ", name());
    for (const tensor & t : op.dst)
        if (t.valid())
            KVCOMP_CHECK_ARG(&t.buf->owner() == this, describe(op), ": a destination buffer belongs to backend ",
                             t.buf->owner().name(), ", not ", name());
    const support s = supports(op);
    if (!s.ok) KVCOMP_THROW(status::unsupported, describe(op), ": not supported on ", name(), ": ", s.reason);
    run_checked(op);
}

int64_t backend::concurrent_workgroups(const op_params &) const {
    return std::max(1, info().compute_units);
}

int64_t backend::decode_task_cost(const op_params &) const {
    return 0;
}

int64_t backend::decode_tail_percent(const op_params &) const {
    return 0;
}

}  // namespace kvcomp
