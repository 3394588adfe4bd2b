# User C module build for CMake-based MicroPython ports (esp32, rp2):
#   make USER_C_MODULES=<repo>/usermod/micropython.cmake
add_library(usermod_microtrain INTERFACE)

# The source lists of sources.mk (shared with the make builds): `NAME = words`,
# lines continued by a backslash, $(NAME) of an earlier list expanded.
file(READ ${CMAKE_CURRENT_LIST_DIR}/sources.mk MICROTRAIN_MK)
string(REPLACE "\\\n" " " MICROTRAIN_MK "${MICROTRAIN_MK}")
set(MICROTRAIN_LISTS "")
foreach(name MICROTRAIN_KERNEL_SRC MICROTRAIN_MTM_SRC MICROTRAIN_SRC MICROTRAIN_SRC_O2)
    string(REGEX MATCH "\n${name} = ([^\n]*)" unused "${MICROTRAIN_MK}")
    set(files "${CMAKE_MATCH_1}")
    foreach(prev IN LISTS MICROTRAIN_LISTS)
        string(REPLACE "$(${prev})" "${${prev}}" files "${files}")
    endforeach()
    set(${name} "${files}")
    list(APPEND MICROTRAIN_LISTS ${name})
endforeach()
separate_arguments(MICROTRAIN_SOURCES UNIX_COMMAND "${MICROTRAIN_SRC}")
list(TRANSFORM MICROTRAIN_SOURCES PREPEND ${CMAKE_CURRENT_LIST_DIR}/)
separate_arguments(MICROTRAIN_SOURCES_O2 UNIX_COMMAND "${MICROTRAIN_SRC_O2}")
list(TRANSFORM MICROTRAIN_SOURCES_O2 PREPEND ${CMAKE_CURRENT_LIST_DIR}/)

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
set_property(SOURCE ${MICROTRAIN_SOURCES_O2} APPEND PROPERTY COMPILE_OPTIONS -O2 -fno-schedule-insns)

target_link_libraries(usermod INTERFACE usermod_microtrain)
