// upload_index_tables: see index_tables.h.
#include "engine/index_tables.h"

#include <algorithm>

namespace kvcomp::engine {

std::vector<tensor> upload_index_tables(backend & be, buffer_ptr & buf,
                                        const std::vector<std::vector<int32_t>> & arrays) {
    std::vector<int32_t> packed;
    std::vector<std::pair<size_t, size_t>> at;
    for (const auto & a : arrays) {
        at.emplace_back(packed.size(), a.size());
        packed.insert(packed.end(), a.begin(), a.end());
        packed.resize((packed.size() + 3) / 4 * 4, 0);  // 16-byte aligned views
    }
    if (!buf || buf->size() < packed.size() * 4 + 16) buf = be.alloc(packed.size() * 8 + 64);
    if (!packed.empty()) be.upload(*buf, 0, packed.data(), packed.size() * 4);
    std::vector<tensor> views;
    for (auto [off, n] : at)
        views.push_back(make_tensor(buf.get(), dtype::i32, {std::max<int64_t>(int64_t(n), 1)}, off * 4));
    return views;
}

}  // namespace kvcomp::engine
