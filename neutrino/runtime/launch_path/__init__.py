"""The launch path of a probed launch: which device, which user line, buffers from the pool, the
enqueued launch, and the C fast path for known kernels."""
