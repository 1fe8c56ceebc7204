"""Module sources: what the program hands the driver (PTX, fatbins, cubins from in-process or
subprocess compilers, frameworks' caches), and which modules and kernels exist."""
