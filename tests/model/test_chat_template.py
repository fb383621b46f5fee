"""Chat templates are data, never code: rendered in jinja2's sandbox, exactly as transformers renders them."""

from __future__ import annotations

import json
import shutil

import pytest

from labkit.model.tokenizer import Tokenizer

ESCAPES = [
    # The reported exploit: reach os through a global's function globals.
    "{{ cycler.__init__.__globals__.os.system('touch {marker}') }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ self.__init__.__globals__ }}",
    "{{ joiner.__init__.__globals__.os.popen('touch {marker}').read() }}",
    "{% set x = messages.append(1) %}{{ x }}",          # mutating what the engine passed in
]


def model_dir_with_template(tmp_path, model_dir, template: str):
    path = tmp_path / "model"
    path.mkdir()
    shutil.copy(model_dir / "tokenizer.json", path / "tokenizer.json")
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return path


@pytest.mark.parametrize("template", ESCAPES)
def test_a_template_cannot_run_code_or_reach_python_internals(tmp_path, model_dir, template):
    marker = tmp_path / "pwned"
    path = model_dir_with_template(tmp_path, model_dir, template.replace("{marker}", str(marker)))
    tok = Tokenizer(path)
    with pytest.raises(ValueError, match="tokenizer_config.json.*sandbox"):
        tok.encode_prompt("hi")
    assert not marker.exists()


def test_a_broken_template_names_its_file(tmp_path, model_dir):
    path = model_dir_with_template(tmp_path, model_dir, "{% for %}")
    with pytest.raises(ValueError, match="tokenizer_config.json.*jinja2"):
        Tokenizer(path)


def test_templates_keep_transformers_helpers(tmp_path, model_dir):
    template = ("{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('no') }}{% endif %}"
                "{{ m | tojson }}{% if loop.index > 5 %}{% break %}{% endif %}{% endfor %}")
    tok = Tokenizer(model_dir_with_template(tmp_path, model_dir, template))
    assert tok.apply_chat_template([{"role": "user", "content": "中文"}]) == '{"role": "user", "content": "中文"}'
    with pytest.raises(Exception, match="no"):
        tok.apply_chat_template([{"role": "bad", "content": ""}])


def test_the_default_model_renders_exactly_as_transformers(model_dir):
    from transformers import AutoTokenizer

    ours = Tokenizer(model_dir)
    hf = AutoTokenizer.from_pretrained(str(model_dir))
    for messages in ([{"role": "user", "content": "什么是 KV 缓存？"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\n there"},
                      {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "And?"}]):
        for gen in (True, False):
            assert ours.apply_chat_template(messages, add_generation_prompt=gen) == hf.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=gen)
