/* test_util.c — dtype conversions and the thread pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "util/dtype.h"
#include "util/threadpool.h"

TEST(f16_roundtrip_all_values) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN */
        float f = f16_to_f32((uint16_t)h);
        if (f32_to_f16(f) != h) bad++;
    }
    CHECKF(bad == 0, "%d f16 values do not round-trip", bad);
    CHECK(f16_to_f32(0x3c00) == 1.0f && f16_to_f32(0xc000) == -2.0f && f16_to_f32(0x0001) == ldexpf(1, -24));
    CHECK(f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00);          /* tie to even */
    CHECK(f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3c02);
    CHECK(f32_to_f16(70000.0f) == 0x7c00);
}

TEST(bf16_rounding) {
    CHECK(bf16_to_f32(0x3f80) == 1.0f);
    CHECK(f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3f80);          /* tie to even, down */
    CHECK(f32_to_bf16(1.0f + 3 * ldexpf(1, -8)) == 0x3f82);      /* tie to even, up */
    srand(test_seed());
    for (int i = 0; i < 1000; i++) {
        uint16_t h = (uint16_t)(rand() & 0x7f7f);
        CHECKF(f32_to_bf16(bf16_to_f32(h)) == h, "0x%04x does not round-trip (seed %u)", h, test_seed());
    }
}

TEST(fp8_e4m3_values) {
    CHECK(f8e4m3_to_f32(0x38) == 1.0f);
    CHECK(f8e4m3_to_f32(0x7e) == 448.0f);
    CHECK(f8e4m3_to_f32(0xfe) == -448.0f);
    CHECK(f8e4m3_to_f32(0x01) == ldexpf(1, -9));
    CHECK(f8e4m3_to_f32(0x08) == ldexpf(1, -6));
    CHECK(isnan(f8e4m3_to_f32(0x7f)));
    CHECK(f8e4m3_to_f32(0x3c) == 1.5f);
}

static void fill_idx(void *ctx, size_t b, size_t e) {
    int *v = ctx;
    for (size_t i = b; i < e; i++) v[i] += (int)i + 1;
}

TEST(threadpool_covers_each_index_once) {
    for (int t = 1; t <= 4; t++) {
        sl_pool *p = sl_pool_new(t);
        CHECK(p && sl_pool_size(p) == t);
        for (size_t n = 1; n < 200; n += 37) {
            int *v = calloc(n, sizeof *v);
            sl_pool_for(p, n, 1, fill_idx, v);
            sl_pool_for(p, n, 7, fill_idx, v);
            int ok = 1;
            for (size_t i = 0; i < n; i++) ok &= v[i] == 2 * ((int)i + 1);
            free(v);
            if (!ok) sl_pool_free(p);
            CHECKF(ok, "threads %d n %zu", t, n);
        }
        sl_pool_free(p);
    }
    sl_pool_for(NULL, 3, 1, fill_idx, (int[3]){0});
}
