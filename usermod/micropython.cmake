# Entry point for CMake ports: USER_C_MODULES=<repo>/usermod/micropython.cmake
include(${CMAKE_CURRENT_LIST_DIR}/microtrain/micropython.cmake)
