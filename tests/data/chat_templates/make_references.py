#!/usr/bin/env python3
"""Renders the reference texts tests/test_chat_template.cpp holds models/chat_template.cpp to.

Each family's real Jinja chat template (the string a GGUF file stores as tokenizer.chat_template) is
rendered with jinja2 over one fixed conversation, as transformers' apply_chat_template renders it,
and the text is written next to the template as NAME.txt. qjit leaves the leading BOS token to the
tokenizer, so a BOS that a template writes first (bos_token) is cut from the reference (one written
later, as Llama 2 writes before each later turn, stays).

    pip install jinja2 gguf
    tests/data/chat_templates/make_references.py [--gguf SmolLM2-135M-Instruct.Q4_1.gguf]
                                                 [--llama-cpp-templates DIR]

Sources of the templates (NAME.jinja; rewritten only when a source is given or the file is absent):
  - SmolLM2-135M-Instruct: read from the GGUF file given with --gguf (scripts/fetch_model.sh puts it in
    ~/.cache/qjit/models).
  - Files from Hugging Face model repositories, as llama.cpp keeps them in its models/templates
    (--llama-cpp-templates DIR): Qwen2.5-7B-Instruct, Qwen3-0.6B, Phi-3.5-mini-instruct,
    gemma-2-2b-it, Llama-3.1-8B-Instruct and Mistral-Small-3.2-24B-Instruct-2506.
  - The public template strings written below (WRITTEN): Meta-Llama-3-8B-Instruct,
    Llama-2-7b-chat, Gemma 3 (gemma-3-*-it), Phi-4 and the Mistral v7 form of
    Mistral-Large-Instruct-2411 as llama.cpp's tests hold it.

templates.txt lists every template with the family qjit must detect in it and whether it is rendered
(some are kept for detection alone: gemma-2 refuses a system message, Llama 3.1 writes today's date).
"""

import argparse
import datetime
import pathlib
import sys

import jinja2
import jinja2.sandbox

HERE = pathlib.Path(__file__).resolve().parent

# The conversation every reference renders: a system prompt, a user turn, an assistant turn with
# spaces around it (what trims and strips do shows), and a user turn of two lines.
CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "  Hi there. How can I help?  "},
    {"role": "user", "content": "Who are you?\nAnswer in one line."},
]

# name: (family, bos_token, eos_token, rendered)
TEMPLATES = {
    "smollm2-135m-instruct": ("chatml", "<|im_start|>", "<|im_end|>", True),
    "qwen2.5-7b-instruct": ("chatml", "", "<|im_end|>", True),
    "qwen3-0.6b": ("chatml", "", "<|im_end|>", True),
    "llama-3-8b-instruct": ("llama3", "<|begin_of_text|>", "<|eot_id|>", True),
    "llama-3.1-8b-instruct": ("llama3", "<|begin_of_text|>", "<|eot_id|>", False),
    "llama-2-7b-chat": ("llama2", "<s>", "</s>", True),
    "gemma-3-it": ("gemma", "<bos>", "<eos>", True),
    "gemma-2-2b-it": ("gemma", "<bos>", "<eos>", False),
    "phi-3.5-mini-instruct": ("phi3", "<s>", "<|endoftext|>", True),
    "phi-4": ("phi4", "<|endoftext|>", "<|im_end|>", True),
    "mistral-large-2411": ("mistral-v7", "<s>", "</s>", True),
    "mistral-small-3.2-24b-instruct-2506": ("mistral-v7-tekken", "<s>", "</s>", True),
}

LLAMA_CPP_FILES = {
    "qwen2.5-7b-instruct": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3-0.6b": "Qwen-Qwen3-0.6B.jinja",
    "phi-3.5-mini-instruct": "microsoft-Phi-3.5-mini-instruct.jinja",
    "gemma-2-2b-it": "google-gemma-2-2b-it.jinja",
    "llama-3.1-8b-instruct": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistral-small-3.2-24b-instruct-2506": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
}

WRITTEN = {
    "llama-3-8b-instruct": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
        "{{ content }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"),
    "llama-2-7b-chat": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
        "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
        "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"),
    "gemma-3-it": """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
""",
    "phi-4": (
        "{% for message in messages %}{% if (message['role'] == 'system') %}"
        "{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}"
        "{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|>'}}"
        "{% elif (message['role'] == 'assistant') %}"
        "{{'<|im_start|>assistant<|im_sep|>' + message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}"),
    "mistral-large-2411": (
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}"
        "{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}"
        "{% else %}{{ raise_exception('Only user, system and assistant roles are supported!') }}"
        "{% endif %}{% endfor %}"),
}


def gguf_chat_template(path):
    import gguf  # only needed to refresh SmolLM2's template from its file

    field = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def render(template_text, bos_token, eos_token):
    # As transformers renders chat templates: a sandboxed environment that trims blocks' newlines.
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                             extensions=["jinja2.ext.loopcontrols"])
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda format: datetime.date(2026, 1, 1).strftime(format)
    text = environment.from_string(template_text).render(
        messages=CONVERSATION, add_generation_prompt=True, bos_token=bos_token, eos_token=eos_token)
    if bos_token and "bos_token" in template_text and text.startswith(bos_token):
        text = text[len(bos_token):]
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", help="SmolLM2-135M-Instruct GGUF file to read its template from")
    parser.add_argument("--llama-cpp-templates", help="llama.cpp's models/templates folder")
    arguments = parser.parse_args()

    sources = dict(WRITTEN)
    if arguments.gguf:
        sources["smollm2-135m-instruct"] = gguf_chat_template(arguments.gguf)
    if arguments.llama_cpp_templates:
        folder = pathlib.Path(arguments.llama_cpp_templates)
        for name, file in LLAMA_CPP_FILES.items():
            sources[name] = (folder / file).read_text(encoding="utf-8")

    manifest = ["# template family rendered: each NAME.jinja, the family qjit detects in it, and whether"
                " NAME.txt holds its rendering"]
    for name, (family, bos_token, eos_token, rendered) in TEMPLATES.items():
        template_file = HERE / (name + ".jinja")
        if name in sources:
            template_file.write_text(sources[name], encoding="utf-8")
        elif not template_file.exists():
            sys.exit(f"{template_file.name} is missing and no source for it was given (see --help)")
        if rendered:
            text = render(template_file.read_text(encoding="utf-8"), bos_token, eos_token)
            (HERE / (name + ".txt")).write_text(text, encoding="utf-8")
        manifest.append(f"{name} {family} {'rendered' if rendered else 'detected'}")
    (HERE / "templates.txt").write_text("\n".join(manifest) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
