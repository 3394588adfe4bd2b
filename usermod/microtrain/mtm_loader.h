// Validator and accessors of the `.mtm` model file (docs/format.md, v1.3).
// Pure C99, no MicroPython include, no allocation, no libc, no division and
// no 64-bit multiply (builds for armv6m natmods). The byte buffer is read
// little-endian byte by byte, so it needs no alignment.
#ifndef MTM_LOADER_H
#define MTM_LOADER_H

#include <stdint.h>

#include "mtm_layout.h"

// Where a validation failure is (out-parameter of mt_mtm_validate).
#define MTM_WHERE_FILE 0
#define MTM_WHERE_TENSOR 1
#define MTM_WHERE_LAYER 2
// a layer whose op the build leaves out (a natmod built with OPS=...): the binding names the op
#define MTM_WHERE_LEFT_OUT 3

// Validates the whole file exactly per docs/format.md "Validation" (steps 1-5,
// in order; nothing is read before its bound is checked). Returns NULL when
// valid, else a static message naming the failed check; then *where is one of
// MTM_WHERE_* and *index the tensor or layer index (-1 for the file).
// Uses about 1 KiB of stack (two 4096-bit sets).
const char *mt_mtm_validate(const uint8_t *buf, uint32_t len, int32_t *where, int32_t *index);

// Cheap structural check for the accessors (no CRC, no semantics): the
// buffer holds a header whose table offsets and counts are in range and the
// tables and string pool lie inside it. NULL when ok, else a message.
const char *mt_mtm_check_tables(const uint8_t *buf, uint32_t len);

// Accessors. Valid only after mt_mtm_check_tables (or mt_mtm_validate) passed and,
// for entries, with 0 <= i < n. They fill int32 arrays; u32 fields are stored
// as their bit pattern (NONE reads as -1, f32 scales as raw bits).

// The rows and their fields, MTM_INFO_* / MTM_TROW_* / MTM_LROW_* and the counts
// MTM_INFO_N / MTM_TENSOR_N / MTM_LAYER_N, are in mtm_layout.h (generated).

// Header numbers: version_major, version_minor, flags, total_len, n_tensors,
// n_layers, tensor_table_off, layer_table_off, strings_off, strings_len,
// data_off, data_len, input, output, train_steps.
void mt_mtm_info(const uint8_t *buf, int32_t *out);

// Tensor entry i: dtype, rank, kind, quant, flags, shape[0..4), data_off,
// data_len, scale (f32 bits), zero_point, qscales.
void mt_mtm_tensor(const uint8_t *buf, uint32_t i, int32_t *out);

// Layer entry i: op, act, n_params, n_inputs, flags, name_off (absolute),
// name_len, fused_off (absolute), fused_len, in0, in1, out, weight, bias,
// mult, shift, state[0..4), params_off (absolute file offset of params),
// state[4], state[5] (Adam's second moments, format 1.3; -1 when absent).
void mt_mtm_layer(const uint8_t *buf, uint32_t i, int32_t *out);

uint32_t mt_mtm_n_tensors(const uint8_t *buf);
uint32_t mt_mtm_n_layers(const uint8_t *buf);

// Name of layer i inside the pool if its (off, len) lie within the pool and
// len <= 63 (not otherwise checked); else NULL. *name_len gets the length.
const uint8_t *mt_mtm_layer_name(const uint8_t *buf, uint32_t len, uint32_t i, uint32_t *name_len);

#endif
