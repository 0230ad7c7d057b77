"""Reference implementations written for the benchmarks (not part of anyformer)."""
