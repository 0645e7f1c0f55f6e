/* poison_test.c — poisoning marks unwritten elements; guard regions catch out-of-bounds writes. */
#include <math.h>
#include <string.h>

#include "tests/common/harness.h"
#include "tests/common/poison.h"

int main(void) {
    float x[10];
    poison_f32(x, 10);
    EXPECT(isnan(x[0]) && isnan(x[9]), "f32 poison is NaN");
    EXPECT(count_poison_f32(x, 10) == 10, "all 10 poisoned");
    x[4] = NAN; /* a computed NaN is not the poison pattern */
    x[5] = 1.0f;
    EXPECT(count_poison_f32(x, 10) == 8, "written elements are not counted (%lld)", (long long)count_poison_f32(x, 10));
    uint16_t h[6];
    poison_bf16(h, 6);
    EXPECT((h[0] & 0x7F80) == 0x7F80 && (h[0] & 0x7F) != 0, "bf16 poison is a NaN pattern");
    h[0] = 0x3F80;
    EXPECT(count_poison_bf16(h, 6) == 5, "bf16 count");

    struct guarded g;
    float *d = guarded_alloc(&g, 37 * sizeof(float));
    EXPECT(((uintptr_t)d & 63) == 0, "guarded data is 64-byte aligned");
    for (int i = 0; i < 37; i++) d[i] = (float)i;
    EXPECT(guarded_check(&g, "in bounds") == 0, "in-bounds writes keep the guards");
    test_capture_begin();
    ((unsigned char *)d)[37 * sizeof(float)] ^= 1; /* one byte past the end */
    guarded_check(&g, "past the end");
    EXPECT(test_capture_end() == 1, "a write one byte past the end is caught");
    ((unsigned char *)d)[37 * sizeof(float)] ^= 1;
    test_capture_begin();
    ((unsigned char *)d)[-1] ^= 0x80; /* one byte before the start */
    guarded_check(&g, "before the start");
    EXPECT(test_capture_end() == 1, "a write one byte before the start is caught");
    guarded_free(&g);

    unsigned char buf[100];
    guard_fill(buf, 100);
    EXPECT(guard_check(buf, 100) == -1, "intact guard");
    buf[63] = (unsigned char)~buf[63];
    EXPECT(guard_check(buf, 100) == 63, "first changed guard byte located");
    return test_finish("poison_test");
}
