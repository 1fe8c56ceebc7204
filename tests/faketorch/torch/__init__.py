"""A stand-in for the parts of PyTorch's layout whose first import installs neutrino's autotuning
hooks (tests/test_autotune_window.py); nothing else of torch."""
