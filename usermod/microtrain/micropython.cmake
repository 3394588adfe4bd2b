# User C module build for CMake-based MicroPython ports (esp32, rp2):
#   make USER_C_MODULES=<repo>/usermod/micropython.cmake
add_library(usermod_microtrain INTERFACE)

target_sources(usermod_microtrain INTERFACE
    ${CMAKE_CURRENT_LIST_DIR}/modmicrotrain.c
    ${CMAKE_CURRENT_LIST_DIR}/quant.c
    ${CMAKE_CURRENT_LIST_DIR}/checks.c
    ${CMAKE_CURRENT_LIST_DIR}/conv2d.c
    ${CMAKE_CURRENT_LIST_DIR}/linear.c
    ${CMAKE_CURRENT_LIST_DIR}/activation.c
    ${CMAKE_CURRENT_LIST_DIR}/pool.c
    ${CMAKE_CURRENT_LIST_DIR}/add.c
    ${CMAKE_CURRENT_LIST_DIR}/softmax_xent.c
    ${CMAKE_CURRENT_LIST_DIR}/sparse.c
    ${CMAKE_CURRENT_LIST_DIR}/accumulate.c
    ${CMAKE_CURRENT_LIST_DIR}/mtm_loader.c
)

target_include_directories(usermod_microtrain INTERFACE ${CMAKE_CURRENT_LIST_DIR})

# No fused multiply-add: float gradient accumulation must round as the
# numerics contract says.
target_compile_options(usermod_microtrain INTERFACE -ffp-contract=off)

target_link_libraries(usermod INTERFACE usermod_microtrain)
