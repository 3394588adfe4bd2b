// mtcount: a QEMU TCG plugin that counts executed guest instructions exactly,
// per address range, and snapshots the counts whenever the guest executes a
// marker address.
//
//   qemu-system-arm ... -plugin mtcount.so,map=F,mark=0xADDR[,mark=...][,out=F] -d plugin
//
// map=F   text file, one range a line: "<start hex> <end hex> <category>"
//         (end exclusive, category 0..63). Instructions outside every range
//         count in category "unmapped" (= the largest category + 1); for the
//         MicroPython firmware that is code loaded at run time (natmods).
// mark=A  address of a marker instruction (Thumb bit ignored); up to 8, the
//         marker id is the order given. Each execution writes one line
//         "M <id> <c0> ... <cU>" of cumulative counts per category.
// out=F   output file (default: QEMU's log, i.e. stderr with -d plugin).
// At exit: "E <c0> ... <cU>" and "R <range index> <count>" for every range
// that executed (index = nranges for unmapped).
//
// Exactness: every instruction gets an inline 64-bit add on its own range's
// counter, executed before the instruction, so a translation block left early
// (exception, interrupt, semihosting call) is still counted to the instruction.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qemu_plugin_api.h"

MT_EXPORT int qemu_plugin_version = 1;

#define MAX_MARKS 8
#define MAX_CATS 64

typedef struct {
    uint64_t start, end;
    int cat;
} range_t;

static range_t *ranges;
static size_t n_ranges;
static uint64_t *counts;  // n_ranges + 1 (last: unmapped)
static int n_cats;        // categories incl. unmapped
static uint64_t marks[MAX_MARKS];
static int n_marks;
static FILE *out;

static void emit(const char *s) {
    if (out) {
        fputs(s, out);
    } else {
        qemu_plugin_outs(s);
    }
}

// Cumulative per-category sums as " c0 c1 ... cU\n" appended to buf.
static void cat_line(char *buf, size_t cap, size_t len) {
    uint64_t sum[MAX_CATS + 1];
    memset(sum, 0, sizeof sum);
    for (size_t i = 0; i < n_ranges; ++i) {
        sum[ranges[i].cat] += counts[i];
    }
    sum[n_cats - 1] += counts[n_ranges];
    for (int c = 0; c < n_cats && len < cap; ++c) {
        int k = snprintf(buf + len, cap - len, " %" PRIu64, sum[c]);
        if (k < 0) {
            return;
        }
        len += (size_t)k;
    }
    if (len + 2 <= cap) {
        buf[len] = '\n';
        buf[len + 1] = '\0';
    }
}

static void on_mark(unsigned int vcpu, void *udata) {
    (void)vcpu;
    char buf[64 + 24 * (MAX_CATS + 1)];
    int k = snprintf(buf, sizeof buf, "M %d", (int)(uintptr_t)udata);
    cat_line(buf, sizeof buf, (size_t)k);
    emit(buf);
}

static size_t find_range(uint64_t a) {
    size_t lo = 0, hi = n_ranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a < ranges[mid].start) {
            hi = mid;
        } else if (a >= ranges[mid].end) {
            lo = mid + 1;
        } else {
            return mid;
        }
    }
    return n_ranges;
}

static void on_tb(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; ++i) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t a = qemu_plugin_insn_vaddr(insn);
        for (int m = 0; m < n_marks; ++m) {
            if (a == marks[m]) {
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_mark, QEMU_PLUGIN_CB_NO_REGS,
                                                       (void *)(uintptr_t)m);
            }
        }
        qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &counts[find_range(a)], 1);
    }
}

static void at_exit_cb(qemu_plugin_id_t id, void *udata) {
    (void)id;
    (void)udata;
    char buf[64 + 24 * (MAX_CATS + 1)];
    buf[0] = 'E';
    cat_line(buf, sizeof buf, 1);
    emit(buf);
    for (size_t i = 0; i <= n_ranges; ++i) {
        if (counts[i]) {
            snprintf(buf, sizeof buf, "R %zu %" PRIu64 "\n", i, counts[i]);
            emit(buf);
        }
    }
    if (out) {
        fclose(out);
        out = NULL;
    }
}

static int cmp_range(const void *a, const void *b) {
    const range_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int load_map(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "mtcount: cannot open map %s\n", path);
        return -1;
    }
    size_t cap = 1024;
    ranges = malloc(cap * sizeof *ranges);
    if (!ranges) {
        fclose(f);
        return -1;
    }
    unsigned long long s, e;
    int c;
    int max_cat = -1;
    while (fscanf(f, "%llx %llx %d", &s, &e, &c) == 3) {
        if (c < 0 || c >= MAX_CATS || e <= s) {
            fprintf(stderr, "mtcount: bad map line %llx %llx %d\n", s, e, c);
            fclose(f);
            return -1;
        }
        if (n_ranges == cap) {
            cap *= 2;
            range_t *r = realloc(ranges, cap * sizeof *ranges);
            if (!r) {
                fclose(f);
                return -1;
            }
            ranges = r;
        }
        ranges[n_ranges].start = s;
        ranges[n_ranges].end = e;
        ranges[n_ranges].cat = c;
        n_ranges++;
        if (c > max_cat) {
            max_cat = c;
        }
    }
    fclose(f);
    qsort(ranges, n_ranges, sizeof *ranges, cmp_range);
    for (size_t i = 1; i < n_ranges; ++i) {
        if (ranges[i].start < ranges[i - 1].end) {
            fprintf(stderr, "mtcount: overlapping ranges at %" PRIx64 "\n", ranges[i].start);
            return -1;
        }
    }
    n_cats = max_cat + 2;
    return 0;
}

MT_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    (void)info;
    const char *map = NULL, *outp = NULL;
    for (int i = 0; i < argc; ++i) {
        const char *a = argv[i];
        if (strncmp(a, "map=", 4) == 0) {
            map = a + 4;
        } else if (strncmp(a, "out=", 4) == 0) {
            outp = a + 4;
        } else if (strncmp(a, "mark=", 5) == 0 && n_marks < MAX_MARKS) {
            marks[n_marks++] = strtoull(a + 5, NULL, 0) & ~1ULL;
        } else {
            fprintf(stderr, "mtcount: unknown argument %s\n", a);
            return -1;
        }
    }
    if (map) {
        if (load_map(map) != 0) {
            return -1;
        }
    } else {
        n_cats = 1;
    }
    counts = calloc(n_ranges + 1, sizeof *counts);
    if (!counts) {
        return -1;
    }
    if (outp) {
        out = fopen(outp, "w");
        if (!out) {
            fprintf(stderr, "mtcount: cannot write %s\n", outp);
            return -1;
        }
        setvbuf(out, NULL, _IOLBF, 0);
    }
    char buf[128];
    snprintf(buf, sizeof buf, "mtcount v1 ncat=%d nranges=%zu marks=%d\n", n_cats, n_ranges, n_marks);
    emit(buf);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb);
    qemu_plugin_register_atexit_cb(id, at_exit_cb, NULL);
    return 0;
}
