"""labkit's benchmarks: ``python -m bench`` (``make bench``) runs the CPU ones; ``bench/gpu.py`` the GPU one."""
