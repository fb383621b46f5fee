"""labkit: a small, real LLM inference engine for learning how serving systems work.

    from labkit import LLM, SamplingParams, EngineConfig, SpecConfig
"""

from labkit.config import EngineConfig, SpecConfig
from labkit.i18n import get_language, set_language
from labkit.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "EngineConfig", "SpecConfig", "set_language", "get_language"]
__version__ = "0.1.0"


def __getattr__(name):
    # Import torch-heavy parts lazily so `import labkit` stays cheap for widgets and quizzes.
    if name == "LLM":
        from labkit.llm import LLM
        return LLM
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")
