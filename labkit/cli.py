"""The ``labkit`` command: ``labkit serve …`` (an OpenAI-compatible server) and ``labkit bench …``
(a client that measures any such server)."""

from __future__ import annotations

import sys

USAGE = """usage: labkit {serve,bench} [options]

  labkit serve [--model sim|PATH] [--port 8000] ...   OpenAI-compatible HTTP server over labkit
  labkit bench --model NAME [--base-url URL] ...      benchmark any OpenAI-compatible server

`labkit serve --help` and `labkit bench --help` list every option."""


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    command, rest = argv[0], argv[1:]
    if command == "serve":
        from labkit.serve.cli import main as serve_main
        serve_main(rest)
    elif command == "bench":
        from labkit.serve_bench.cli import main as bench_main
        bench_main(rest)
    else:
        print(USAGE, file=sys.stderr)
        raise SystemExit(f"labkit: unknown command {command!r}")


if __name__ == "__main__":
    main()
