// qstrs specific to the lab's WebAssembly build (none).
