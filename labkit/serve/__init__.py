"""``labkit serve``: an OpenAI-compatible HTTP server over one labkit engine (docs/serving.md).

    from labkit.serve import BackgroundServer, ServedModel
    with BackgroundServer(ServedModel(llm.engine, "sim")) as server:
        ...  # any OpenAI client at server.base_url + "/v1"
"""

from labkit.serve.app import ServedModel, build_app
from labkit.serve.server import BackgroundServer, run_foreground

__all__ = ["BackgroundServer", "ServedModel", "build_app", "run_foreground"]
