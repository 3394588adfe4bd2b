"""What the accuracy runs and the benchmarks share: data, reference models, protocol (see README.md)."""
