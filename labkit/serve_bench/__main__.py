"""``python -m labkit.serve_bench`` = ``labkit bench``."""

from labkit.serve_bench.cli import main

if __name__ == "__main__":
    main()
