"""How well microtrain learns and how exactly it computes, on real data (see README.md)."""
