"""What labkit decides once per machine, by checking bits or timing: which form each CPU product takes,
and up to how many rows the C kernels walk a weight sequentially. `labkit.kernels.linear_forms` is the
face the model, the benchmarks and the tests call; its docstring maps the modules here."""
