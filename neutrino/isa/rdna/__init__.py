"""AMD RDNA 3 (gfx11, wave32): the GCN assembly graph and steps in gfx11's dialect (target.py, dialect.py)."""
