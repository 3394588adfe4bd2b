"""What microtrain costs: instruction counts, host time, heap and flash (see README.md)."""
