"""Host-side tools for microtrain."""
