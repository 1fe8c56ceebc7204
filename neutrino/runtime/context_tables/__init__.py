"""The context tables on the runtime's side (ranges, launch arguments and their tensors, the CUPTI
timeline and its clock); spec/trace-format.md, "Context tables"."""
