// `.mtm` accessors: see mtm_loader.h and docs/format.md. They read an entry's fields into
// int32 rows after mt_mtm_check_tables (or the validator, mtm_loader.c) passed.
#include <stddef.h>

#include "mtm_loader.h"
#include "mtm_read.h"

const char *mt_mtm_check_tables(const uint8_t *b, uint32_t len) {
    if (len < MTM_HEADER_SIZE || b[0] != 'M' || b[1] != 'T' || b[2] != 'M' || b[3] != 'F') {
        return "not an .mtm header (too short or bad magic)";
    }
    const uint32_t n_t = rd32(b, MTM_H_N_TENSORS), n_l = rd32(b, MTM_H_N_LAYERS);
    const uint32_t s_off = rd32(b, MTM_H_STRINGS_OFF), s_len = rd32(b, MTM_H_STRINGS_LEN);
    const uint32_t lt_off = rd32(b, MTM_H_LAYER_TABLE_OFF);
    if (n_t < 1 || n_t > MTM_MAX_TENSORS || n_l < 1 || n_l > MTM_MAX_LAYERS) {
        return "n_tensors / n_layers out of range";
    }
    if (rd32(b, MTM_H_TENSOR_TABLE_OFF) != MTM_HEADER_SIZE || lt_off != MTM_HEADER_SIZE + MTM_TENSOR_ENTRY * n_t ||
        s_off != lt_off + MTM_LAYER_ENTRY * n_l || s_off > len || s_len > len - s_off) {
        return "tables or string pool outside the buffer";
    }
    return NULL;
}

uint32_t mt_mtm_n_tensors(const uint8_t *b) {
    return rd32(b, MTM_H_N_TENSORS);
}

uint32_t mt_mtm_n_layers(const uint8_t *b) {
    return rd32(b, MTM_H_N_LAYERS);
}

static int32_t as_i32(uint32_t u) {
    return u < 0x80000000u ? (int32_t)u : -(int32_t)(0xFFFFFFFFu - u) - 1;
}

// The rows by name (mtm_layout.h). Runs of u32 fields that the rows keep in the entry's order
// are copied in loops (tests/format/test_mtm_layout.py checks that they are such runs).
void mt_mtm_info(const uint8_t *b, int32_t *out) {
    out[MTM_INFO_VERSION_MAJOR] = (int32_t)rd16(b, MTM_H_VERSION_MAJOR);
    out[MTM_INFO_VERSION_MINOR] = (int32_t)rd16(b, MTM_H_VERSION_MINOR);
    out[MTM_INFO_FLAGS] = as_i32(rd32(b, MTM_H_FLAGS));
    out[MTM_INFO_TOTAL_LEN] = as_i32(rd32(b, MTM_H_TOTAL_LEN));
    out[MTM_INFO_N_TENSORS] = as_i32(rd32(b, MTM_H_N_TENSORS));
    out[MTM_INFO_N_LAYERS] = as_i32(rd32(b, MTM_H_N_LAYERS));
    out[MTM_INFO_TENSOR_TABLE_OFF] = as_i32(rd32(b, MTM_H_TENSOR_TABLE_OFF));
    for (uint32_t k = 0; k < MTM_INFO_N - MTM_INFO_LAYER_TABLE_OFF; ++k) {  // layer_table_off .. train_steps
        out[MTM_INFO_LAYER_TABLE_OFF + k] = as_i32(rd32(b, MTM_H_LAYER_TABLE_OFF + 4 * k));
    }
}

void mt_mtm_tensor(const uint8_t *b, uint32_t i, int32_t *out) {
    const uint32_t e = MTM_HEADER_SIZE + MTM_TENSOR_ENTRY * i;
    for (uint32_t k = 0; k < 4; ++k) {  // dtype, rank, kind, quant
        out[MTM_TROW_DTYPE + k] = (int32_t)rd8(b, e + MTM_T_DTYPE + k);
    }
    for (uint32_t k = 0; k < MTM_TENSOR_N - MTM_TROW_FLAGS; ++k) {  // flags .. qscales
        out[MTM_TROW_FLAGS + k] = as_i32(rd32(b, e + MTM_T_FLAGS + 4 * k));
    }
}

void mt_mtm_layer(const uint8_t *b, uint32_t i, int32_t *out) {
    const uint32_t e = rd32(b, MTM_H_LAYER_TABLE_OFF) + MTM_LAYER_ENTRY * i, s_off = rd32(b, MTM_H_STRINGS_OFF);
    for (uint32_t k = 0; k < 4; ++k) {  // op, act, n_params, n_inputs
        out[MTM_LROW_OP + k] = (int32_t)rd8(b, e + MTM_L_OP + k);
    }
    for (uint32_t k = 0; k <= MTM_LROW_STATE3 - MTM_LROW_FLAGS; ++k) {  // flags .. state[3]
        out[MTM_LROW_FLAGS + k] = as_i32(rd32(b, e + MTM_L_FLAGS + 4 * k));
    }
    out[MTM_LROW_NAME_OFF] = as_i32(rd32(b, e + MTM_L_NAME_OFF) + s_off);
    out[MTM_LROW_FUSED_OFF] = as_i32(rd32(b, e + MTM_L_FUSED_OFF) + s_off);
    out[MTM_LROW_PARAMS_OFF] = as_i32(e + MTM_PARAMS_OFF);
    for (uint32_t s = 4; s < 6; ++s) {  // state[4], state[5]
        out[MTM_LROW_STATE4 + s - 4] = as_i32(l_state(b, e, s));
    }
}

const uint8_t *mt_mtm_layer_name(const uint8_t *b, uint32_t len, uint32_t i, uint32_t *name_len) {
    if (mt_mtm_check_tables(b, len) || i >= rd32(b, MTM_H_N_LAYERS)) {
        return NULL;
    }
    const uint32_t e = rd32(b, MTM_H_LAYER_TABLE_OFF) + MTM_LAYER_ENTRY * i, s_len = rd32(b, MTM_H_STRINGS_LEN);
    const uint32_t off = rd32(b, e + MTM_L_NAME_OFF), n = rd32(b, e + MTM_L_NAME_LEN);
    if (off >= s_len || n > MTM_MAX_NAME || n > s_len - off) {
        return NULL;
    }
    *name_len = n;
    return b + rd32(b, MTM_H_STRINGS_OFF) + off;
}
