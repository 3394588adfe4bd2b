// HAL shared by ports/qemu and ports/host (see mtport.c): no pins (py/mphal.h
// would otherwise pull extmod/virtpin.h, absent from the core-only tree) and
// no interrupt character (stdin is the semihosting console), except in board
// mode (Ctrl-C on the UART).
#define mp_hal_pin_obj_t void *

#if MICROPY_KBD_EXCEPTION
#include "shared/runtime/interrupt_char.h"
#else
static inline void mp_hal_set_interrupt_char(int c) {
    (void)c;
}
#endif
