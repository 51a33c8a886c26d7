"""Real-text workloads: chat prompts written out as text, then turned into token ids by a real
model's tokenizer and chat template.

- ``code_edit``: a function from Python's own standard-library sources (of the running
  interpreter) and a request for the same function with one small change. The answer repeats
  most of the prompt, which is what prompt lookup (n-gram speculation) feeds on.
- ``questions``: short general-knowledge questions; little of the answer is in the prompt.

Texts come from this module and the standard library only, so every machine can build them;
the stdlib's sources differ between Python versions, so ``code_edit`` prompts do too.
Tokenizing needs ``transformers`` (imported when a workload is built, never at import time).
"""

from __future__ import annotations

import ast
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from twinserve.core.workload.arrivals import arrival_times
from twinserve.core.workload.spec import RequestSpec
from twinserve.core.workload.streams import stream
from twinserve.core.workload.workload import Workload

# Standard-library modules whose functions make the code-edit prompts (small, plain Python).
CODE_MODULES: tuple[str, ...] = (
    "bisect", "calendar", "colorsys", "fnmatch", "genericpath", "glob", "heapq", "keyword",
    "linecache", "ntpath", "posixpath", "shlex", "statistics", "string", "textwrap", "tokenize",
)

QUESTIONS: tuple[str, ...] = (
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What is the boiling point of water at sea level in Celsius?",
    "Who wrote the play Romeo and Juliet?",
    "What gas do plants take in from the air?",
    "How many days are there in a leap year?",
    "What is the largest planet in the solar system?",
    "What language is spoken in Brazil?",
    "What is the square root of 81?",
    "Which ocean lies between Europe and North America?",
    "What is the chemical symbol for gold?",
    "How many continents are there?",
    "What is the freezing point of water in Fahrenheit?",
    "Which animal is known as the king of the jungle?",
    "What do bees make?",
    "What is the tallest mountain on Earth?",
    "How many minutes are in an hour?",
    "What color do you get when you mix blue and yellow?",
    "Which planet is called the red planet?",
    "What is the main ingredient of guacamole?",
    "In which country are the pyramids of Giza?",
    "What is the opposite of cold?",
    "How many sides does a hexagon have?",
    "What instrument has black and white keys?",
    "What is the capital of Japan?",
    "Which organ pumps blood through the body?",
    "What is H2O more commonly called?",
    "How many hours are in a day?",
    "What season comes after winter?",
    "Which bird is a symbol of peace?",
    "What is the currency of the United Kingdom?",
    "What is the longest river in Africa?",
)

# The small changes a code-edit prompt asks for; ``{name}`` is the function's name and
# ``{param}`` its first parameter (changes that need one are skipped for functions without).
CODE_CHANGES: tuple[str, ...] = (
    "Rename the function to `{name}_v2`.",
    "Rename the parameter `{param}` to `{param}_in` everywhere in the function.",
    "Add a one-line docstring as the first statement of the function.",
    "Add a comment line `# checked` as the first statement of the function.",
)


@dataclass(frozen=True)
class CodeFunction:
    """One function of the standard library: its module, name, first parameter ('' if none)
    and its exact source text."""

    module: str
    name: str
    param: str
    source: str


def module_sources(modules: Sequence[str] = CODE_MODULES, stdlib_dir: str | None = None) -> list[Path]:
    """The source file of each of ``modules`` in ``stdlib_dir`` (default: the running
    interpreter's standard library), whether it exists or not."""
    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    return [root / f"{mod}.py" for mod in modules]


def stdlib_functions(modules: Sequence[str] = CODE_MODULES, min_lines: int = 6, max_lines: int = 30,
                     stdlib_dir: str | None = None) -> list[CodeFunction]:
    """The top-level functions of ``modules`` whose source has ``min_lines``..``max_lines``
    lines, in module then file order (read from the source files, nothing is imported)."""
    out: list[CodeFunction] = []
    for mod, path in zip(modules, module_sources(modules, stdlib_dir)):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for node in ast.parse(text).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            src = ast.get_source_segment(text, node)
            if src is None or not min_lines <= src.count("\n") + 1 <= max_lines:
                continue
            args = [a.arg for a in node.args.posonlyargs + node.args.args]
            out.append(CodeFunction(mod, node.name, args[0] if args else "", src))
    return out


def code_edit_prompt(fn: CodeFunction, change: str) -> str:
    """The user message asking for ``fn`` with ``change`` applied."""
    ask = change.format(name=fn.name, param=fn.param)
    return (f"Here is a function from Python's `{fn.module}` module:\n\n```python\n{fn.source}\n```\n\n"
            f"{ask} Reply with the complete modified function in one code block, and nothing else.")


def code_edit_texts(n: int, seed: int = 0, stdlib_dir: str | None = None) -> list[tuple[str, CodeFunction]]:
    """``n`` (prompt, function) pairs: functions drawn from `stdlib_functions` (of
    ``stdlib_dir``, default the running interpreter's), each with a change it admits (seeded; the
    same arguments and sources give the same list)."""
    fns = stdlib_functions(stdlib_dir=stdlib_dir)
    if not fns:
        raise RuntimeError("found no standard-library sources to build code-edit prompts from")
    rng = stream(seed, "code-edit")
    out: list[tuple[str, CodeFunction]] = []
    for i in rng.integers(0, len(fns), size=n).tolist():
        fn = fns[i]
        changes = [c for c in CODE_CHANGES if fn.param or "{param}" not in c]
        out.append((code_edit_prompt(fn, changes[int(rng.integers(0, len(changes)))]), fn))
    return out


def question_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` questions from `QUESTIONS`, drawn with replacement (seeded)."""
    idx = stream(seed, "questions").integers(0, len(QUESTIONS), size=n)
    return [QUESTIONS[i] for i in idx.tolist()]


Encoder = Callable[[str], list[int]]


def chat_encoder(tokenizer: str, system: str | None = None) -> tuple[Encoder, Encoder]:
    """(chat prompt → ids, plain text → ids) of the tokenizer in directory ``tokenizer``: the
    first renders one user message (after ``system``, if given) through the chat template with
    the generation prompt, as a chat server does; the second encodes text without specials."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    if not tok.chat_template:
        raise ValueError(f"the tokenizer in {tokenizer} has no chat template")

    def chat(text: str) -> list[int]:
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def plain(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False)["input_ids"])

    return chat, plain


def _workload(prompts: list[list[int]], outputs: list[int], name: str, rate: float, arrival: str,
              seed: int, arrival_kwargs: dict | None) -> Workload:
    times = arrival_times(arrival, len(prompts), stream(seed, "arrivals"), rate, **dict(arrival_kwargs or {}))
    specs = [RequestSpec(i, float(t), len(p), int(o), tokens=np.asarray(p, dtype=np.int32))
             for i, (t, p, o) in enumerate(zip(times.tolist(), prompts, outputs))]
    vocab = max(int(max(p)) for p in prompts) + 1 if prompts else 1
    return Workload(specs, name=name, seed=seed, vocab_size=vocab)


def code_edit_workload(tokenizer: str, num_requests: int = 100, rate: float = 1.0, seed: int = 0,
                       arrival: str = "poisson", arrival_kwargs: dict | None = None,
                       extra_output: int = 16, max_output: int = 1024,
                       stdlib_dir: str | None = None) -> Workload:
    """Code-edit chat requests tokenized by ``tokenizer`` (a model directory). Each request's
    output length (its ``max_tokens``) is the function's own token count plus ``extra_output``
    (the answer is that function again, in a code block), at most ``max_output``. ``stdlib_dir``:
    a folder with the `CODE_MODULES` sources of another interpreter (the same requests as a run
    made there), default the running one's."""
    chat, plain = chat_encoder(tokenizer)
    pairs = code_edit_texts(num_requests, seed, stdlib_dir)
    prompts = [chat(text) for text, _ in pairs]
    outputs = [min(max_output, len(plain(fn.source)) + extra_output) for _, fn in pairs]
    return _workload(prompts, outputs, f"code_edit({arrival}, rate={rate})", rate, arrival, seed, arrival_kwargs)


def questions_workload(tokenizer: str, num_requests: int = 100, rate: float = 1.0, seed: int = 0,
                       arrival: str = "poisson", arrival_kwargs: dict | None = None,
                       output_len: int = 64) -> Workload:
    """Short-question chat requests tokenized by ``tokenizer`` (a model directory), each with
    ``output_len`` as its output length."""
    chat, _ = chat_encoder(tokenizer)
    prompts = [chat(q) for q in question_texts(num_requests, seed)]
    return _workload(prompts, [output_len] * len(prompts), f"questions({arrival}, rate={rate})", rate,
                     arrival, seed, arrival_kwargs)
