"""``python -m labkit.serve`` = ``labkit serve``."""

from labkit.serve.cli import main

if __name__ == "__main__":
    main()
