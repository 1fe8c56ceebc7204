"""The HIP side of the runtime (AMD): code objects and the HIP hook. Untested on AMD hardware."""
