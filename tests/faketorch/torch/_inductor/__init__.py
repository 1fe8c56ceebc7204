"""TorchInductor: its runtime and select_algorithm are imported on demand, as in torch."""
