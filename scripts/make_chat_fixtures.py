#!/usr/bin/env python3
"""Generates the chat-template fixtures of tests/engine/test_chat.c: renders conversations with
the real Jinja templates through `jinja2` exactly as Hugging Face's apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, raise_exception), and stores the
templates and the expected outputs under tests/engine/data/. The C test compares weft's native
renderer byte-for-byte.

Templates: the default model's own (SmolLM2, read from its GGUF metadata) and representative
official ones embedded below (OpenHermes-2.5 plain ChatML, Meta-Llama-3-8B-Instruct,
Llama-2-7b-chat-hf, Mistral-7B-Instruct-v0.2 'v1' with system prompt).

    pip install jinja2   # if missing (only this script needs it)
    python3 scripts/make_chat_fixtures.py [model.gguf]
"""
import os
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "tests", "engine", "data")
DEFAULT_MODEL = "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf"

CHATML_PLAIN = (  # teknium/OpenHermes-2.5-Mistral-7B: ChatML without a default system prompt
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

LLAMA3 = (  # meta-llama/Meta-Llama-3-8B-Instruct
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

LLAMA2 = (  # meta-llama/Llama-2-7b-chat-hf
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

MISTRAL = (  # mistralai/Mistral-7B-Instruct-v0.2 (mistral 'v1' template with a system prompt)
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n"
    "    {%- endif %}\n{%- endfor %}\n"
)

S, U, A = "system", "user", "assistant"
CONVERSATIONS = {
    "single_user": [(U, "Hello")],
    "system_user": [(S, "You are a pirate."), (U, "Hi")],
    "multi_turn": [(S, "You are a helpful assistant"), (U, "Hello"), (A, "Hi there"),
                   (U, "Who are you"), (A, "   I am an assistant   "), (U, "Another question")],
    "no_system_multi": [(U, "What is 2+2?"), (A, "4"), (U, "And 3+3?")],
    "ends_with_assistant": [(U, "Say hi"), (A, "hi")],
    "whitespace": [(U, "  \n padded \t "), (A, " \u3000ok\u00a0\n"), (U, "\u2003x\u2029\x1f")],
    "unicode_and_markup": [(S, "Règles:\n- sois bref\n"),
                           (U, "héllo 世界 🎉 \"quotes\" 'single' {{ not jinja }} <|im_end|> [INST] \\n")],
    "empty_contents": [(S, ""), (U, "")],
    "only_system": [(S, "Just a system prompt.")],
    "two_users": [(U, "first"), (U, "second")],
    "assistant_first": [(A, "I start"), (U, "ok")],
    "system_in_middle_even": [(U, "a"), (A, "b"), (S, "late system"), (A, "c")],
    "system_at_odd": [(U, "a"), (S, "late system")],
}

# (template file, weft format, bos, eos, template text)
TEMPLATES = [
    ("chat_template_smollm2.jinja", "chatml", "<|im_start|>", "<|im_end|>", None),
    ("chat_template_chatml.jinja", "chatml", "<s>", "</s>", CHATML_PLAIN),
    ("chat_template_llama3.jinja", "llama3", "<|begin_of_text|>", "<|end_of_text|>", LLAMA3),
    ("chat_template_llama2.jinja", "llama2", "<s>", "</s>", LLAMA2),
    ("chat_template_mistral.jinja", "mistral", "<s>", "</s>", MISTRAL),
]

# Where weft deliberately differs from the template (documented in engine/chat.h): the llama2
# template silently DROPS a system message at an odd position; weft rejects it instead.
DEVIATIONS = {("llama2", "system_at_odd")}


def raise_exception(msg):
    raise TemplateError(msg)


def render(template, messages, add_generation_prompt, bos, eos):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    t = env.from_string(template)
    return t.render(messages=[{"role": r, "content": c} for r, c in messages],
                    add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos)


def smollm2_template(model):
    from gguf import GGUFReader
    return GGUFReader(model).fields["tokenizer.chat_template"].contents()


def blob(out, header, data):
    b = data.encode("utf-8")
    out += f"{header} {len(b)}\n".encode() + b + b"\n"


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("WEFT_MODEL", DEFAULT_MODEL)
    os.makedirs(DATA, exist_ok=True)
    out = bytearray(b"# generated by scripts/make_chat_fixtures.py: do not edit\n")
    n_cases = 0
    for fname, fmt, bos, eos, text in TEMPLATES:
        if text is None:
            text = smollm2_template(model)
        with open(os.path.join(DATA, fname), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        for name, conv in CONVERSATIONS.items():
            if (fmt, name) in DEVIATIONS:
                continue
            for gen in (True, False):
                out += f"CASE {fmt}/{name}/{'gen' if gen else 'nogen'}\n".encode()
                out += f"TEMPLATE {fname}\nFORMAT {fmt}\nBOS {bos}\nEOS {eos}\nGEN {int(gen)}\n".encode()
                for role, content in conv:
                    blob(out, f"MSG {role}", content)
                try:
                    blob(out, "EXPECT", render(text, conv, gen, bos, eos))
                except TemplateError:
                    out += b"ERROR\n"
                out += b"END\n"
                n_cases += 1
    save("chat_cases.txt", out, n_cases)
    write_llamacpp_cases()


def save(name, out, n_cases):
    path = os.path.join(DATA, name)
    with open(path, "wb") as f:
        f.write(out)
    print(f"{path}: {n_cases} cases, {len(out)} bytes")


def llamacpp_apply(name, conv, add_ass):
    """llama.cpp's built-in formatter `name` (llama_chat_apply_template), via llama-cpp-python."""
    import ctypes
    import llama_cpp
    arr = (llama_cpp.llama_chat_message * len(conv))()
    keep = []
    for i, (role, content) in enumerate(conv):
        keep += [role.encode(), content.encode()]
        arr[i].role, arr[i].content = keep[-2], keep[-1]
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_chat_apply_template(name.encode(), arr, len(conv), add_ass, buf, len(buf))
    if n < 0 or n > len(buf):
        raise RuntimeError(f"llama_chat_apply_template({name}) failed: {n}")
    return buf.raw[:n].decode("utf-8")


def write_llamacpp_cases():
    """Formats without a Jinja template in the model file (Gemma 3 270M's GGUF has none): the
    reference is llama.cpp's own built-in formatter."""
    out = bytearray(b"# generated by scripts/make_chat_fixtures.py from llama.cpp's built-in "
                    b"'gemma' formatter (llama-cpp-python): do not edit\n")
    n_cases = 0
    for name, conv in CONVERSATIONS.items():
        for gen in (True, False):
            out += f"CASE gemma/{name}/{'gen' if gen else 'nogen'}\n".encode()
            out += f"TEMPLATE none\nFORMAT gemma\nBOS <bos>\nEOS <eos>\nGEN {int(gen)}\n".encode()
            for role, content in conv:
                blob(out, f"MSG {role}", content)
            blob(out, "EXPECT", llamacpp_apply("gemma", conv, gen))
            out += b"END\n"
            n_cases += 1
    save("chat_cases_gemma.txt", out, n_cases)


if __name__ == "__main__":
    sys.exit(main())
