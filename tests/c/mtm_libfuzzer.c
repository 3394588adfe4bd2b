// libFuzzer target: the .mtm validator (usermod/microtrain/mtm_loader.c) and, on
// every file it accepts, the kernels a forward pass and a training step call,
// with the file's own descriptors, weights and biases. Built by
// tests/support/reliability/fuzz.py with clang -fsanitize=fuzzer,address,undefined.
//
// Each input is validated as given, then again with total_len and the CRC
// fixed up (random bytes almost never carry a right CRC, so without that the
// fuzzer would stay in the envelope checks). On an accepted file, every
// kernel-side check the binding runs must pass: a file the validator accepts
// but a kernel refuses is a crash here (abort), as is any sanitizer report.
// Every buffer is its own exact-size malloc, so ASan sees any overrun.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_kernels.h"
#include "mtm_loader.h"

#define MAX_ACT_BYTES (1u << 22)  // skip files whose activations need more (speed, not safety)

static void wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t crc32(const uint8_t *b, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t k = 0; k < n; ++k) {
        c ^= b[k];
        for (int j = 0; j < 8; ++j) {
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        }
    }
    return c ^ 0xFFFFFFFFu;
}

static void refuse(const char *what, const char *msg) {
    fprintf(stderr, "validator accepted a file the kernels refuse: %s: %s\n", what, msg);
    abort();
}

static void need(const char *what, const char *msg) {
    if (msg) {
        refuse(what, msg);
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        abort();
    }
    return p;
}

static void fill(int8_t *p, size_t n, uint32_t seed) {
    for (size_t k = 0; k < n; ++k) {
        seed = seed * 1664525u + 1013904223u;
        p[k] = (int8_t)(seed >> 24);
    }
}

// The largest R <= 15 with 2^R * terms * 16384 <= 2^31 - 1 (quant.weight_ratios).
static int32_t ratio_one(int32_t terms) {
    int32_t r = 15;
    while (r > 0 && ((int64_t)1 << r) * terms * 16384 > INT32_MAX) {
        --r;
    }
    return (int32_t)1 << r;
}

// A GRU / LSTM layer's tables (copied where the kernels want int32 alignment) and backward
// buffers: g gate blocks, nrq requantisations and kept bytes per unit (GRU 3 / 6 / 4, LSTM
// 4 / 8 / 6), dtanh at byte dt of the table tensor (after the cell's 256-byte tables).
typedef struct {
    int32_t *bias, *mult, *shift, *wr, *dtanh, *shifts, *acc, *gw, *gb;
    int8_t *keep;
    const int8_t *w, *tables;
} rnn_bufs_t;

static rnn_bufs_t rnn_bufs(const uint8_t *b, const int32_t *l, size_t t, size_t d, size_t h, size_t g, size_t nrq,
                           size_t kept, size_t dt) {
    int32_t tw[MTM_TENSOR_N], tb[MTM_TENSOR_N], tm[MTM_TENSOR_N], ts[MTM_TENSOR_N], tt[MTM_TENSOR_N];
    mt_mtm_tensor(b, (uint32_t)l[12], tw);
    mt_mtm_tensor(b, (uint32_t)l[13], tb);
    mt_mtm_tensor(b, (uint32_t)l[14], tm);
    mt_mtm_tensor(b, (uint32_t)l[15], ts);
    mt_mtm_tensor(b, (uint32_t)l[10], tt);
    const size_t rows = g * h;
    rnn_bufs_t r;
    r.bias = xmalloc(16 * h), r.mult = xmalloc(4 * nrq * h), r.shift = xmalloc(4 * nrq * h);
    r.wr = xmalloc(4 * rows), r.dtanh = xmalloc(1024), r.shifts = xmalloc(4 * t);
    r.acc = xmalloc(4 * (g + 2) * h), r.gw = xmalloc(4 * rows * (d + h)), r.gb = xmalloc(16 * h);
    r.keep = xmalloc(kept * h * t);
    memcpy(r.bias, b + tb[9], 16 * h);
    memcpy(r.mult, b + tm[9], 4 * nrq * h);
    memcpy(r.shift, b + ts[9], 4 * nrq * h);
    memcpy(r.dtanh, b + tt[9] + dt, 1024);
    for (size_t k = 0; k < rows; ++k) {
        r.wr[k] = ratio_one((int32_t)rows);
    }
    r.w = (const int8_t *)(b + tw[9]);
    r.tables = (const int8_t *)(b + tt[9]);
    return r;
}

static void rnn_free(rnn_bufs_t *r) {
    free(r->bias), free(r->mult), free(r->shift), free(r->wr), free(r->dtanh), free(r->shifts);
    free(r->acc), free(r->gw), free(r->gb), free(r->keep);
}

// Forward and training-step kernels of every layer of an accepted file.
static void run_kernels(const uint8_t *b, uint32_t len) {
    int32_t info[MTM_INFO_N], t[MTM_TENSOR_N], l[MTM_LAYER_N];
    mt_mtm_info(b, info);
    const uint32_t n_t = (uint32_t)info[4], n_l = (uint32_t)info[5];
    int8_t **act = calloc(n_t, sizeof *act);
    size_t *numel = calloc(n_t, sizeof *numel);
    if (!act || !numel) {
        abort();
    }
    size_t total = 0;
    for (uint32_t i = 0; i < n_t; ++i) {
        mt_mtm_tensor(b, i, t);
        if (t[2] != 0) {
            continue;  // CONST / STATE
        }
        size_t n = 1;
        for (int32_t d = 0; d < t[1]; ++d) {
            n *= (size_t)t[5 + d];
        }
        numel[i] = n;
        total += n;
    }
    if (total <= MAX_ACT_BYTES) {
        for (uint32_t i = 0; i < n_t; ++i) {
            if (numel[i]) {
                act[i] = xmalloc(numel[i]);
                fill(act[i], numel[i], i);
            }
        }
        for (uint32_t j = 0; j < n_l; ++j) {
            mt_mtm_layer(b, j, l);
            const int32_t op = l[0], np = l[2];
            int32_t prm[20];
            memcpy(prm, b + l[20], 4u * (uint32_t)np);
            int8_t *x = act[l[9]], *y = act[l[11]];
            const size_t nx = numel[l[9]], ny = numel[l[11]];
            int8_t *e = xmalloc(ny), *ein = xmalloc(nx);
            int32_t *acc = xmalloc(4 * nx);
            fill(e, ny, j + 77u);
            if (op == 1 || op == 2) {
                int32_t tw[MTM_TENSOR_N], tb[MTM_TENSOR_N], tm[MTM_TENSOR_N], ts[MTM_TENSOR_N];
                mt_mtm_tensor(b, (uint32_t)l[12], tw);
                mt_mtm_tensor(b, (uint32_t)l[13], tb);
                mt_mtm_tensor(b, (uint32_t)l[14], tm);
                mt_mtm_tensor(b, (uint32_t)l[15], ts);
                const int8_t *w = (const int8_t *)(b + tw[9]);
                const size_t nw = (size_t)tw[10];
                const int32_t oc = (int32_t)(tb[10] / 4);
                int32_t *bias = xmalloc(4u * (size_t)oc), *mult = xmalloc(4u * (size_t)oc);
                int32_t *shift = xmalloc(4u * (size_t)oc), *wr = xmalloc(4u * (size_t)oc);
                memcpy(bias, b + tb[9], 4u * (size_t)oc);
                memcpy(mult, b + tm[9], 4u * (size_t)oc);
                memcpy(shift, b + ts[9], 4u * (size_t)oc);
                need("requant", mt_requant_params_check(mult, shift, oc));
                need("bias", mt_bias_check(bias, oc));
                float *gwf = xmalloc(4 * nw), *gbf = xmalloc(4u * (size_t)oc);
                int32_t *gwi = xmalloc(4 * nw), *gbi = xmalloc(4u * (size_t)oc);
                uint8_t *mask = xmalloc((size_t)oc);
                for (int32_t c = 0; c < oc; ++c) {
                    mask[c] = (uint8_t)(c & 1);
                }
                if (op == 1 && np == MT_CONV2D_DIL_NPARAMS) {  // dilated
                    mt_conv2d_dil_params_t p;
                    memcpy(&p, prm, sizeof p);
                    need("conv2d dil", mt_conv2d_dil_check(&p));
                    const int32_t terms = p.c.k_h * p.c.k_w * (p.c.out_c / p.c.groups);
                    for (int32_t c = 0; c < oc; ++c) {
                        wr[c] = ratio_one(terms);
                    }
                    need("conv2d wr", mt_wr_check(wr, oc, terms));
                    mt_conv2d_dil_s8_forward(&p, x, w, bias, mult, shift, y);
                    (void)mt_conv2d_dil_s8_grad_input(&p, e, w, wr, mask, -129, 128, acc, ein);
                    mt_conv2d_dil_s8_grad_weight(&p, x, e, mask, gwi, gbi);
                    memset(gwf, 0, 4 * nw);
                    memset(gbf, 0, 4u * (size_t)oc);
                    mt_conv2d_dil_s8_grad_weight_f32(&p, x, e, NULL, 0.001f, 0.5f, gwf, gbf, 0);
                } else if (op == 1) {
                    mt_conv2d_params_t p;
                    memcpy(&p, prm, sizeof p);
                    need("conv2d", mt_conv2d_check(&p));
                    const int32_t terms = p.k_h * p.k_w * (p.out_c / p.groups);
                    for (int32_t c = 0; c < oc; ++c) {
                        wr[c] = ratio_one(terms);
                    }
                    need("conv2d wr", mt_wr_check(wr, oc, terms));
                    mt_conv2d_s8_forward(&p, x, w, bias, mult, shift, y);
                    (void)mt_conv2d_s8_grad_input(&p, e, w, wr, NULL, -129, 128, acc, ein);
                    (void)mt_conv2d_s8_grad_input(&p, e, w, wr, mask, -129, 128, acc, ein);
                    mt_conv2d_s8_grad_weight(&p, x, e, mask, gwi, gbi);
                    memset(gwf, 0, 4 * nw);
                    memset(gbf, 0, 4u * (size_t)oc);
                    mt_conv2d_s8_grad_weight_f32(&p, x, e, NULL, 0.001f, 0.5f, gwf, gbf, 0);
                } else {
                    mt_linear_params_t p;
                    memcpy(&p, prm, sizeof p);
                    need("linear", mt_linear_check(&p));
                    for (int32_t c = 0; c < oc; ++c) {
                        wr[c] = ratio_one(p.out_n);
                    }
                    need("linear wr", mt_wr_check(wr, oc, p.out_n));
                    mt_linear_s8_forward(&p, x, w, bias, mult, shift, y);
                    (void)mt_linear_s8_grad_input(&p, e, w, wr, mask, -129, 128, acc, ein);
                    mt_linear_s8_grad_weight(&p, x, e, NULL, gwi, gbi);
                    memset(gwf, 0, 4 * nw);
                    memset(gbf, 0, 4u * (size_t)oc);
                    mt_linear_s8_grad_weight_f32(&p, x, e, mask, 0.001f, 0.5f, gwf, gbf, 0);
                }
                const int32_t zp = prm[op == 1 ? 14 : 3];
                if (l[1] == 1) {
                    mt_relu_s8_backward(y, e, ny, zp);
                } else if (l[1] == 2) {
                    mt_relu6_s8_backward(y, e, ny, zp, prm[op == 1 ? 16 : 5]);
                }
                free(bias), free(mult), free(shift), free(wr), free(gwf), free(gbf), free(gwi), free(gbi);
                free(mask);
            } else if (op == 3 || op == 4) {
                int32_t v[MT_MSG_NVALS];
                need("relu zp", mt_level_check(prm[1], v));
                if (op == 3) {
                    mt_relu_s8_forward(x, y, nx, prm[1]);
                    mt_relu_s8_backward(y, e, ny, prm[1]);
                } else {
                    need("relu6 q6", mt_q6_check(prm[2], prm[1]));
                    need("relu6 q6 level", mt_level_check(prm[2], v));
                    mt_relu6_s8_forward(x, y, nx, prm[1], prm[2]);
                    mt_relu6_s8_backward(y, e, ny, prm[1], prm[2]);
                }
            } else if (op == 5 || op == 6) {
                mt_pool_params_t p;
                memcpy(&p, prm, sizeof p);
                need("pool", mt_pool_check(&p));
                if (op == 5) {
                    mt_maxpool_s8_forward(&p, x, y);
                    (void)mt_maxpool_s8_grad_input(&p, x, e, acc, ein);
                } else {
                    mt_avgpool_s8_forward(&p, x, y);
                    (void)mt_avgpool_s8_grad_input(&p, e, acc, ein);
                }
                if (!mt_pool_disjoint_check(&p)) {  // with the relu6 mask: into ein, then over a copy of x
                    const int32_t lo = e[0], hi = lo + 40 > 128 ? 128 : lo + 40;
                    if (op == 5) {
                        (void)mt_maxpool_s8_grad_input_act(&p, x, e, lo, hi, ein);
                        memcpy(ein, x, nx);
                        (void)mt_maxpool_s8_grad_input_act(&p, ein, e, lo, hi, ein);
                    } else {
                        (void)mt_avgpool_s8_grad_input_act(&p, x, e, lo, hi, ein);
                        memcpy(ein, x, nx);
                        (void)mt_avgpool_s8_grad_input_act(&p, ein, e, lo, hi, ein);
                    }
                }
            } else if (op == 7) {
                int32_t v[MT_MSG_NVALS];
                need("gap hw", mt_hw_check(prm[0], v));
                need("gap c", mt_channels_check(prm[1], v));
                need("gap hw*c", mt_hw_c_check(prm[0], prm[1]));
                need("gap grad c", mt_gap_channels_check(prm[0], (uint32_t)prm[1]));
                mt_global_avgpool_s8_forward(x, prm[0], prm[1], y);
                mt_global_avgpool_s8_grad_input(e, prm[0], prm[1], ein);
            } else if (op == 9) {  // LUT: weight slot = table, bias slot = derivative table
                int32_t tt[MTM_TENSOR_N], td[MTM_TENSOR_N], v[MT_MSG_NVALS];
                mt_mtm_tensor(b, (uint32_t)l[12], tt);
                mt_mtm_tensor(b, (uint32_t)l[13], td);
                const int32_t *dt = (const int32_t *)(const void *)(b + td[9]);
                need("lut dtable", mt_lut_dtable_check(dt, v));
                mt_lut_s8_forward(x, (const int8_t *)(b + tt[9]), y, ny);
                (void)mt_lut_s8_grad_input(x, e, dt, ein, nx);
            } else if (op == 10) {  // CONCAT: e and ein sized for the output / one input
                mt_concat_params_t p;
                memcpy(&p, prm, sizeof p);
                need("concat", mt_concat_check(&p));
                mt_concat_s8_forward(&p, x, act[l[10]], y);
                int8_t *ein2 = xmalloc(numel[l[10]]);
                mt_concat_s8_grad_input(&p, e, 0, ein);
                mt_concat_s8_grad_input(&p, e, 1, ein2);
                free(ein2);
            } else if (op == 11) {
                mt_upsample_params_t p;
                memcpy(&p, prm, sizeof p);
                need("upsample", mt_upsample_check(&p));
                mt_upsample_s8_forward(&p, x, y);
                (void)mt_upsample_s8_grad_input(&p, e, ein);
            } else if (op == 12) {  // MUL: the second input broadcast per position or channel
                mt_mul_params_t p;
                memcpy(&p, prm, sizeof p);
                need("mul", mt_mul_check(&p));
                mt_mul_s8_forward(&p, x, act[l[10]], y);
            } else if (op == 13) {
                mt_layernorm_params_t p;
                memcpy(&p, prm, sizeof p);
                need("layernorm", mt_layernorm_check(&p));
                mt_layernorm_s8_forward(&p, x, y);
                (void)mt_layernorm_s8_grad_input(&p, x, e, ein);
            } else if (op == 14) {  // SOFTMAX: its table is the loss's, checked by check-kernels' cases
                mt_softmax_params_t p;
                memcpy(&p, prm, sizeof p);
                need("softmax", mt_softmax_check(&p));
                (void)mt_softmax_s8_grad_input(&p, y, e, ein);
            } else if (op == 15) {
                mt_matmul_params_t p;
                memcpy(&p, prm, sizeof p);
                p.heads = np == MT_MATMUL_NPARAMS + 1 ? prm[MT_MATMUL_NPARAMS - 1] : 1;  // (12: the factor)
                need("matmul", mt_matmul_check(&p));
                mt_matmul_s8_forward(&p, x, act[l[10]], y);
            } else if (op == 16) {  // GRU: its tables in in1; forward keeps the steps' gates, then BPTT
                mt_gru_params_t p;
                memcpy(&p, prm, sizeof p);
                need("gru", mt_gru_check(&p));
                rnn_bufs_t r = rnn_bufs(b, l, (size_t)p.t, (size_t)p.d, (size_t)p.h, 3, 6, 4, 768);
                need("gru bias", mt_gru_bias_check(r.bias, p.h));
                need("gru requant", mt_gru_rq_check(r.mult, r.shift, p.h));
                need("gru dtanh", mt_gru_dtanh_check(r.dtanh, 256));
                need("gru wr", mt_gru_wr_check(r.wr, p.h));
                mt_gru_s8_forward(&p, x, r.w, r.bias, r.mult, r.shift, r.tables, y, r.keep);
                (void)mt_gru_s8_backward(&p, x, r.w, r.wr, r.dtanh, y, r.keep, e, r.shifts, r.acc, r.gw, r.gb, ein);
                rnn_free(&r);
            } else if (op == 17) {  // LSTM: its tables in in1 (five of 256 B, then dtanh); keeps T x 6H
                mt_lstm_params_t p;
                memcpy(&p, prm, sizeof p);
                need("lstm", mt_lstm_check(&p));
                rnn_bufs_t r = rnn_bufs(b, l, (size_t)p.t, (size_t)p.d, (size_t)p.h, 4, 8, 6, 1280);
                need("lstm bias", mt_lstm_bias_check(r.bias, p.h));
                need("lstm requant", mt_lstm_rq_check(r.mult, r.shift, p.h));
                need("lstm dtanh", mt_gru_dtanh_check(r.dtanh, 256));
                need("lstm wr", mt_lstm_wr_check(r.wr, p.h));
                mt_lstm_s8_forward(&p, x, r.w, r.bias, r.mult, r.shift, r.tables, y, r.keep);
                (void)mt_lstm_s8_backward(&p, x, r.w, r.wr, r.dtanh, y, r.keep, e, r.shifts, r.acc, r.gw, r.gb, ein);
                rnn_free(&r);
            } else {
                mt_add_params_t p;
                memcpy(&p, prm, sizeof p);
                need("add", mt_add_check(&p));
                mt_add_s8_forward(&p, x, act[l[10]], y);
                int8_t *merged = xmalloc(ny);
                (void)mt_add_s8_grad_merge(e, 32768, y, 12345, ny, merged);
                free(merged);
            }
            free(e), free(ein), free(acc);
        }
        // the loss of the output (cross_entropy), label 0
        const uint32_t out = (uint32_t)info[13];
        need("classes", mt_classes_check((uint32_t)numel[out]));
        uint32_t lut[17];  // trimmed: d >= 17 reads as 0
        for (int d = 0; d < 17; ++d) {
            lut[d] = 65536u >> d;
        }
        int32_t v[MT_MSG_NVALS];
        need("lut", mt_softmax_lut_check(lut, 17, v));
        int8_t *err = xmalloc(numel[out]);
        int32_t stats[3];
        (void)mt_softmax_xent_s8(act[out], (int32_t)numel[out], 0, lut, 17, err, stats);
        free(err);
    }
    for (uint32_t i = 0; i < n_t; ++i) {
        free(act[i]);
    }
    free(act);
    free(numel);
    (void)len;
}

static void one(const uint8_t *data, size_t size) {
    int32_t where, index;
    // 8-aligned exact-size copy: int32 tensors are read in place, as on the board
    uint8_t *b = xmalloc(size);
    memcpy(b, data, size);
    const char *msg = mt_mtm_validate(b, (uint32_t)size, &where, &index);
    if (!msg) {
        uint32_t name_len;
        int32_t row[MTM_LAYER_N];
        if (mt_mtm_check_tables(b, (uint32_t)size)) {
            refuse("tables", "accepted file fails mt_mtm_check_tables");
        }
        for (uint32_t j = 0; j < mt_mtm_n_layers(b); ++j) {
            mt_mtm_layer(b, j, row);
            if (!mt_mtm_layer_name(b, (uint32_t)size, j, &name_len)) {
                refuse("layer name", "no name for a layer of an accepted file");
            }
        }
        run_kernels(b, (uint32_t)size);
    }
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 24)) {
        return 0;
    }
    one(data, size);
    if (size >= MTM_HEADER_SIZE + 4) {
        uint8_t *f = xmalloc(size);
        memcpy(f, data, size);
        wr32(f + 16, (uint32_t)size);
        wr32(f + size - 4, crc32(f, size - 4));
        one(f, size);
        free(f);
    }
    return 0;
}
