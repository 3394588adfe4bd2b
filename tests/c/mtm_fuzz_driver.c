// Host harness for usermod/microtrain/mtm_loader.c and mtm_access.c (built by
// tests/format/test_mtm_loader.py with -fsanitize=address,undefined).
// Usage: mtm_fuzz_driver CORPUS VERDICTS
// CORPUS: b"MTMC" u32 count, then per file u32 len + bytes (little-endian).
// VERDICTS: one byte per file, '1' accepted / '0' rejected, then '\n'.
// Each file is copied into its own exactly-sized heap block so that ASan sees
// any read past its end. Accepted files also go through every accessor.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mtm_loader.h"

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CORPUS VERDICTS\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *all = malloc((size_t)size);
    if (!all || fread(all, 1, (size_t)size, f) != (size_t)size || size < 8 || memcmp(all, "MTMC", 4) != 0) {
        fprintf(stderr, "bad corpus\n");
        return 2;
    }
    fclose(f);
    FILE *out = fopen(argv[2], "wb");
    if (!out) {
        perror(argv[2]);
        return 2;
    }
    const uint32_t count = rd32(all + 4);
    size_t pos = 8;
    uint32_t accepted = 0;
    for (uint32_t k = 0; k < count; ++k) {
        const uint32_t n = rd32(all + pos);
        pos += 4;
        unsigned char *b = malloc(n ? n : 1);
        memcpy(b, all + pos, n);
        pos += n;
        int32_t where = 99, index = 99;
        const char *msg = mt_mtm_validate(b, n, &where, &index);
        if (msg) {
            if (where < 0 || where > 2 || msg[0] == 0) {
                fprintf(stderr, "file %u: bad where %d / empty message\n", k, where);
                return 3;
            }
            uint32_t nl;
            (void)mt_mtm_layer_name(b, n, 0, &nl);
        } else {
            ++accepted;
            int32_t info[MTM_INFO_N], t[MTM_TENSOR_N], l[MTM_LAYER_N];
            if (mt_mtm_check_tables(b, n) != NULL) {
                fprintf(stderr, "file %u: valid but mt_mtm_check_tables fails\n", k);
                return 3;
            }
            mt_mtm_info(b, info);
            for (uint32_t i = 0; i < mt_mtm_n_tensors(b); ++i) {
                mt_mtm_tensor(b, i, t);
            }
            for (uint32_t i = 0; i < mt_mtm_n_layers(b); ++i) {
                mt_mtm_layer(b, i, l);
            }
        }
        fputc(msg ? '0' : '1', out);
        free(b);
    }
    fputc('\n', out);
    fclose(out);
    free(all);
    printf("mtm_fuzz_driver: %u files, %u accepted\n", count, accepted);
    return 0;
}
