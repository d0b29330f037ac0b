"""Benchmarks: Moldau side by side with Tansu and the wire ceiling (`make bench`; see README.md here)."""
