/* SHA-256 against FIPS 180-4 example digests. */
#include "common.h"

#include <string.h>

static void digest_hex(const void *data, size_t len, char hex[65])
{
    psr_sha256 h;
    uint8_t d[32];
    psr_sha256_init(&h);
    psr_sha256_update(&h, data, len);
    psr_sha256_final(&h, d);
    psr_hex(d, 32, hex);
}

static void test_known_digests(void **state)
{
    (void)state;
    char hex[65];
    digest_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    digest_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    digest_hex(two_blocks, strlen(two_blocks), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_streaming_equals_one_shot(void **state)
{
    (void)state;
    /* One million 'a', fed in odd-sized pieces across block edges. */
    static char a[1000000];
    memset(a, 'a', sizeof a);
    psr_sha256 h;
    uint8_t d[32];
    char hex[65];
    psr_sha256_init(&h);
    for (size_t at = 0; at < sizeof a;) {
        size_t n = (at % 97) + 1;
        if (n > sizeof a - at)
            n = sizeof a - at;
        psr_sha256_update(&h, a + at, n);
        at += n;
    }
    psr_sha256_final(&h, d);
    psr_hex(d, 32, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_digests),
        cmocka_unit_test(test_streaming_equals_one_shot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
