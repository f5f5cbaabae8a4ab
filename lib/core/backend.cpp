#include "core/backend.h"

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

}  // namespace kvcomp
