# User C module build for CMake-based MicroPython ports (esp32, rp2):
#   make USER_C_MODULES=<repo>/usermod/micropython.cmake
add_library(usermod_microtrain INTERFACE)

set(MICROTRAIN_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/modmicrotrain.c
    ${CMAKE_CURRENT_LIST_DIR}/quant.c
    ${CMAKE_CURRENT_LIST_DIR}/checks.c
    ${CMAKE_CURRENT_LIST_DIR}/conv2d.c
    ${CMAKE_CURRENT_LIST_DIR}/linear.c
    ${CMAKE_CURRENT_LIST_DIR}/activation.c
    ${CMAKE_CURRENT_LIST_DIR}/lut.c
    ${CMAKE_CURRENT_LIST_DIR}/pool.c
    ${CMAKE_CURRENT_LIST_DIR}/add.c
    ${CMAKE_CURRENT_LIST_DIR}/concat.c
    ${CMAKE_CURRENT_LIST_DIR}/upsample.c
    ${CMAKE_CURRENT_LIST_DIR}/softmax_xent.c
    ${CMAKE_CURRENT_LIST_DIR}/sparse.c
    ${CMAKE_CURRENT_LIST_DIR}/accumulate.c
    ${CMAKE_CURRENT_LIST_DIR}/update.c
    ${CMAKE_CURRENT_LIST_DIR}/zo.c
    ${CMAKE_CURRENT_LIST_DIR}/mtm_loader.c
    ${CMAKE_CURRENT_LIST_DIR}/softfloat.c
)

target_sources(usermod_microtrain INTERFACE ${MICROTRAIN_SOURCES})

target_include_directories(usermod_microtrain INTERFACE ${CMAKE_CURRENT_LIST_DIR})

# No fused multiply-add: float gradient accumulation must round as the
# numerics contract says. A source property, not an INTERFACE compile option:
# that would reach every source of the target linking `usermod` (the whole
# firmware, math.log/exp/pow included). This file is include()d by
# py/usermod.cmake from the port's directory, the one defining the firmware
# target, so the property is visible where our sources are compiled.
set_property(SOURCE ${MICROTRAIN_SOURCES} APPEND PROPERTY COMPILE_OPTIONS -ffp-contract=off)
# The kernels with register-blocked loops at -O2, as in the natmod
# (usermod/microtrain/Makefile says why -fno-schedule-insns).
set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/conv2d.c ${CMAKE_CURRENT_LIST_DIR}/linear.c
             ${CMAKE_CURRENT_LIST_DIR}/quant.c ${CMAKE_CURRENT_LIST_DIR}/sparse.c
             ${CMAKE_CURRENT_LIST_DIR}/pool.c ${CMAKE_CURRENT_LIST_DIR}/activation.c
             APPEND PROPERTY COMPILE_OPTIONS -O2 -fno-schedule-insns)

target_link_libraries(usermod INTERFACE usermod_microtrain)
