// Little-endian reads of an `.mtm` buffer, shared by the validator (mtm_loader.c, mtm_rules_seq.c)
// and the accessors (mtm_access.c); private to those. Byte by byte: the buffer needs no alignment.
#ifndef MTM_READ_H
#define MTM_READ_H

#include <stdint.h>

#include "mtm_layout.h"

// A natmod of some op families only (OPS=...) runs the layer ops of its generated table's
// MT_OPS_LAYERS: a layer of another op is refused, so the rules of those ops are never called
// and its linker drops them (the constant masks below, in mtm_loader.c); every other build runs them all.
#ifdef MT_FUNCS_OPS_H
#include MT_FUNCS_OPS_H
#else
#define MT_OPS_LAYERS 0xFFFFFFFFu
#endif
#define MTM_RUNS(op) ((MT_OPS_LAYERS >> (op)) & 1u)
#define MTM_RUNS_SEQ ((MT_OPS_LAYERS & (0xFu << MTM_OP_MUL)) != 0u)  // MUL, LAYERNORM, SOFTMAX, MATMUL
#define MTM_RUNS_RNN ((MT_OPS_LAYERS & (3u << MTM_OP_GRU)) != 0u)    // GRU, LSTM


static inline uint32_t rd8(const uint8_t *b, uint32_t off) {
    return b[off];
}
static inline uint32_t rd16(const uint8_t *b, uint32_t off) {
    return (uint32_t)b[off] | ((uint32_t)b[off + 1] << 8);
}
static inline uint32_t rd32(const uint8_t *b, uint32_t off) {
    return (uint32_t)b[off] | ((uint32_t)b[off + 1] << 8) | ((uint32_t)b[off + 2] << 16) | ((uint32_t)b[off + 3] << 24);
}
static inline int32_t rdi32(const uint8_t *b, uint32_t off) {
    const uint32_t u = rd32(b, off);
    // two's complement without implementation-defined conversion
    return u < 0x80000000u ? (int32_t)u : -(int32_t)(0xFFFFFFFFu - u) - 1;
}

// One tensor of a layer as the rules of mtm_rules_seq.c read it (mtm_loader.c fills it).
typedef struct {
    uint32_t rank, dim[4], numel, scale;  // numel 0: more than 2^32 - 1; scale: float32 bits
    int32_t zp;
    uint32_t dtype, kind, quant, off;  // off: the data's file offset
} mtm_tview_t;

// The fused activation's clamp rule of CONV2D / LINEAR / ADD / MUL / MATMUL (mtm_loader.c).
const char *mt_mtm_act_rule(uint32_t act, int32_t out_zp, int32_t a_min, int32_t a_max);
// The shape and parameter rules of MUL, LAYERNORM, SOFTMAX and MATMUL (mtm_rules_seq.c): x, x2
// (the second input; x for the one-input ops), y; p the layer's n_p params.
const char *mt_mtm_seq_rules(uint32_t op, uint32_t act, const int32_t *p, uint32_t n_p, const mtm_tview_t *x,
                             const mtm_tview_t *x2, const mtm_tview_t *y);

// The rules of a GRU or an LSTM layer (op; mtm_rules_rnn.c) over b, the file: its params p and the
// views of x, the tables (in1), y, weight, bias, mult, shift.
const char *mt_mtm_rnn_rules(const uint8_t *b, uint32_t op, const int32_t *p, const mtm_tview_t *v);

// State slot s (0..5) of the layer entry at e, or MTM_NONE. Slots 4 and 5 (Adam's
// second moments, format 1.3) are the two u16 at entry offsets 68 and 70, 0xFFFF
// when absent; in older files that word is reserved (0) and they are absent.
static inline uint32_t l_state(const uint8_t *b, uint32_t e, uint32_t s) {
    if (s < 4) {
        return rd32(b, e + MTM_L_STATE + 4 * s);
    }
    if (rd16(b, MTM_H_VERSION_MINOR) < 3) {
        return MTM_NONE;
    }
    const uint32_t v = rd16(b, e + MTM_L_STATE4 + 2 * (s - 4));
    return v == MTM_NONE16 ? MTM_NONE : v;
}

#endif
