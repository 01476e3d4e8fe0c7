/* test_sha256.c - SHA-256 against the FIPS 180-4 / NIST example vectors and sha256sum */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"
#include "engine/base/error.h"
#include "engine/base/sha256.h"

static const char *hex_of(const void *data, size_t n)
{
    static char hex[65];
    uint8_t d[32];
    dl_sha256_buffer(data, n, d);
    return dl_sha256_hex(d, hex);
}

static void test_known_vectors(void)
{
    CHECK(strcmp(hex_of("", 0),
                 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
    CHECK(strcmp(hex_of("abc", 3),
                 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(strcmp(hex_of(two, strlen(two)),
                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
    const char *four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                       "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    CHECK(strcmp(hex_of(four, strlen(four)),
                 "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1") == 0);
    /* one million 'a', fed in odd-sized pieces */
    dl_sha256 c;
    dl_sha256_init(&c);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof a ? left : sizeof a;
        dl_sha256_update(&c, a, n);
        left -= n;
    }
    uint8_t d[32];
    char hex[65];
    dl_sha256_final(&c, d);
    CHECK(strcmp(dl_sha256_hex(d, hex),
                 "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
}

/* Every length around the padding boundaries, piecewise == one shot. */
static void test_lengths_and_pieces(void)
{
    uint8_t msg[200];
    for (int i = 0; i < 200; i++)
        msg[i] = (uint8_t)(i * 31 + 7);
    for (size_t n = 0; n <= 200; n++) {
        uint8_t one[32], parts[32];
        dl_sha256_buffer(msg, n, one);
        dl_sha256 c;
        dl_sha256_init(&c);
        for (size_t i = 0; i < n; i += 3)
            dl_sha256_update(&c, msg + i, n - i < 3 ? n - i : 3);
        dl_sha256_final(&c, parts);
        CHECK_MSG(memcmp(one, parts, 32) == 0, "length %zu", n);
    }
}

static void test_file_matches_sha256sum(void)
{
    char path[] = "/tmp/dl-test-sha256-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        SKIP("mkstemp failed");
        return;
    }
    FILE *f = fdopen(fd, "wb");
    for (int i = 0; i < 100000; i++)
        fputc((i * 7919) & 255, f);
    fclose(f);
    char hex[65], cmd[128], want[65] = "";
    CHECK_OK(dl_sha256_file(path, hex));
    snprintf(cmd, sizeof cmd, "sha256sum %s 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    if (p && fscanf(p, "%64s", want) == 1)
        CHECK(strcmp(hex, want) == 0);
    if (p)
        pclose(p);
    unlink(path);
    CHECK(dl_sha256_file(path, hex) == DL_EIO);
    CHECK(strstr(dl_error_message(), path) != NULL);
}

int main(void)
{
    RUN(test_known_vectors);
    RUN(test_lengths_and_pieces);
    RUN(test_file_matches_sha256sum);
    CHECK_EXIT();
}
