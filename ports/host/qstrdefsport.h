// qstrs specific to the host twin (none).
