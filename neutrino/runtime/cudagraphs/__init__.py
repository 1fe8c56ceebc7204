"""Probed kernels inside CUDA graphs: capture, the device ring each replay fills, and the host sinks
that drain it."""
