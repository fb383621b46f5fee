"""``python -m labkit.benchmark`` = ``labkit bench``."""

from labkit.benchmark.cli import main

if __name__ == "__main__":
    main()
