"""Instrumenting a kernel, once per (context, kernel): the probe loaded for the run, the code cache,
and the probed code built, loaded and laid out."""
