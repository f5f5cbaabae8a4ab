// Page allocator and page tables: no leaks, no double use, exact FlashInfer arrays.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.h"
#include "host/paged/page_pool.h"

using kvcomp::host::page_pool;
using kvcomp::host::page_table;

TEST(page_pool, allocates_all_or_nothing) {
    page_pool pool(5);
    std::vector<int32_t> a;
    EXPECT_TRUE(pool.allocate(3, a));
    EXPECT_EQ(pool.free_pages(), 2);
    std::vector<int32_t> b;
    EXPECT_FALSE(pool.allocate(3, b));
    EXPECT_TRUE(b.empty());
    EXPECT_EQ(pool.free_pages(), 2);
    EXPECT_TRUE(pool.allocate(2, b));
    std::set<int32_t> all(a.begin(), a.end());
    all.insert(b.begin(), b.end());
    EXPECT_EQ(all.size(), 5u);  // every page handed out once
    pool.release(a);
    pool.release(b);
    EXPECT_EQ(pool.free_pages(), 5);
}

TEST(page_pool, rejects_bad_release_and_stays_intact) {
    page_pool pool(4);
    std::vector<int32_t> a;
    ASSERT_TRUE(pool.allocate(2, a));
    try {
        pool.release({a[0], 7});
        FAIL() << "out-of-range page accepted";
    } catch (const kvcomp::error & e) {
        EXPECT_EQ(e.code(), kvcomp::status::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("page 7"), std::string::npos) << e.what();
    }
    EXPECT_EQ(pool.used_pages(), 2);  // nothing released by the failed call
    EXPECT_THROW(pool.release({a[0], a[0]}), kvcomp::error);
    EXPECT_EQ(pool.used_pages(), 2);
    pool.release(a);
    EXPECT_THROW(pool.release({a[0]}), kvcomp::error);  // double release
    EXPECT_EQ(pool.used_pages(), 0);
}

TEST(page_table, arrays_match_lengths) {
    page_pool pool(64);
    page_table table(pool, 16);
    const int64_t lens[] = {1, 15, 16, 17, 257, 0};
    std::vector<int32_t> ids;
    for (int64_t len : lens) {
        ids.push_back(table.create_sequence());
        ASSERT_TRUE(table.extend(ids.back(), len));
    }
    const auto b = table.batch(ids);
    ASSERT_EQ(b.indptr.size(), ids.size() + 1);
    EXPECT_EQ(b.max_seq_len, 257);
    for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t pages = b.indptr[i + 1] - b.indptr[i];
        const int64_t len = pages == 0 ? 0 : (pages - 1) * 16 + b.last_page_len[i];
        EXPECT_EQ(len, lens[i]) << "sequence " << i;
        if (lens[i] > 0) {
            EXPECT_GE(b.last_page_len[i], 1);
            EXPECT_LE(b.last_page_len[i], 16);
        }
    }
    EXPECT_EQ(pool.used_pages(), 1 + 1 + 1 + 2 + 17 + 0);
}

TEST(page_table, plan_append_places_last_tokens) {
    page_pool pool(8);
    page_table table(pool, 4);
    const int32_t a = table.create_sequence(), b = table.create_sequence();
    ASSERT_TRUE(table.extend(a, 5));
    ASSERT_TRUE(table.extend(b, 2));
    ASSERT_TRUE(table.extend(a, 1));
    const auto plan = table.plan_append({a, b}, {1, 2});
    EXPECT_EQ(plan.batch_idx, (std::vector<int32_t>{0, 1, 1}));
    EXPECT_EQ(plan.positions, (std::vector<int32_t>{5, 0, 1}));
    EXPECT_THROW(table.plan_append({a}, {7}), kvcomp::error);
}

TEST(page_table, exhausted_pool_leaves_sequence_unchanged) {
    page_pool pool(3);
    page_table table(pool, 8);
    const int32_t a = table.create_sequence(), b = table.create_sequence();
    ASSERT_TRUE(table.extend(a, 20));  // 3 pages
    EXPECT_FALSE(table.extend(b, 1));
    EXPECT_EQ(table.length(b), 0);
    EXPECT_FALSE(table.extend(a, 5));  // needs a 4th page
    EXPECT_EQ(table.length(a), 20);
    EXPECT_TRUE(table.extend(a, 4));  // fits in the last page
    table.release(a);
    EXPECT_EQ(pool.used_pages(), 0);
    EXPECT_THROW(table.release(a), kvcomp::error);
}

TEST(page_table, random_churn_returns_pool_to_empty) {
    page_pool pool(200);
    std::mt19937 rng(7);
    {
        page_table table(pool, 16);
        std::vector<int32_t> live;
        for (int step = 0; step < 2000; ++step) {
            if (live.empty() || rng() % 3 == 0) {
                live.push_back(table.create_sequence());
            } else if (rng() % 4 == 0) {
                const size_t i = rng() % live.size();
                table.release(live[i]);
                live.erase(live.begin() + long(i));
            } else {
                table.extend(live[rng() % live.size()], int64_t(rng() % 40));
            }
            int64_t pages = 0;
            std::set<int32_t> seen;
            for (int32_t id : live) {
                pages += int64_t(table.pages(id).size());
                for (int32_t p : table.pages(id)) EXPECT_TRUE(seen.insert(p).second) << "page used twice";
            }
            ASSERT_EQ(pages, pool.used_pages());
        }
    }  // the table's destructor returns the rest
    EXPECT_EQ(pool.used_pages(), 0);
}

TEST(page_table, reserve_holds_pages_without_growing) {
    page_pool pool(4);
    page_table table(pool, 4);
    const int32_t a = table.create_sequence(), b = table.create_sequence();
    ASSERT_TRUE(table.reserve(a, 10));  // 3 pages
    EXPECT_EQ(table.length(a), 0);
    EXPECT_EQ(pool.used_pages(), 3);
    EXPECT_FALSE(table.reserve(b, 8));  // only 1 page left
    EXPECT_EQ(pool.used_pages(), 3);
    ASSERT_TRUE(table.extend(a, 10));  // uses the reserved pages
    EXPECT_EQ(pool.used_pages(), 3);
    const auto batch = table.batch({a});
    EXPECT_EQ(batch.indices.size(), 3u);
    EXPECT_EQ(batch.last_page_len[0], 2);
}
