// qstrs specific to the fwport test interpreter (none).
