// HAL of the fwport test interpreter: no pins (so py/mphal.h does not pull
// extmod/virtpin.h, which the core-only tree lacks) and no interrupt char.
#define mp_hal_pin_obj_t void *

static inline void mp_hal_set_interrupt_char(char c) {
    (void)c;
}
