// qstrs specific to the project's ports (none beyond what the sources use).
