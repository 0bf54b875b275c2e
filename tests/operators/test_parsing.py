"""Reply parsing: code extraction and idea lists, on well-formed and garbage replies."""
import pytest

from evokernel.operators.parsing import extract_code, extract_summary, parse_ideas

CODE = """import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


def test_python_block_defining_modelnew_is_taken():
    reply = f"Idea: copy kernel\n\nHere you go:\n```python\n{CODE}```\nThanks."
    assert extract_code(reply) == CODE


def test_python_block_preferred_over_other_blocks():
    reply = (f"```cpp\n__global__ void k() {{}}\n```\n```text\nclass ModelNew is below\n```\n"
             f"```python\n{CODE}```")
    assert extract_code(reply) == CODE


def test_last_python_block_wins_and_blocks_without_modelnew_are_skipped():
    old = CODE.replace("return x", "return x + 0")
    reply = (f"```python\n{old}```\nfixed:\n```python\n{CODE}```\n"
             "```python\nprint('usage')\n```")
    assert extract_code(reply) == CODE


def test_untagged_or_other_tagged_block_is_a_fallback():
    assert extract_code(f"```\n{CODE}```") == CODE
    assert extract_code(f"```Python3 extra words\n{CODE}```") == CODE
    assert extract_code(f"~~~python\n{CODE}~~~") == CODE


def test_closing_fence_glued_to_code():
    reply = f"```python\n{CODE.rstrip()}```"
    assert extract_code(reply) == CODE


def test_unclosed_fence_accepted_only_when_it_parses():
    assert extract_code(f"```python\n{CODE}") == CODE
    truncated = CODE[: CODE.index("def forward") + 15]
    assert extract_code(f"```python\n{truncated}") is None


def test_bare_code_reply_accepted_only_when_it_parses():
    assert extract_code(CODE) == CODE
    assert extract_code("class ModelNew(nn.Module): blah blah {") is None


@pytest.mark.parametrize("reply", [
    "", "   ", None, 42, b"bytes", "I cannot help with that.",
    "```python\nprint('no model here')\n```",
    "```python\nclass Model(nn.Module):\n    pass\n```",
    "```", "``````", "```python", "\x00\x01```\n\n```",
])
def test_no_code_gives_none(reply):
    assert extract_code(reply) is None


def test_summary_line_outside_code():
    reply = f"**Idea:** tile rows in shared memory.\n```python\n# Idea: not this one\n{CODE}```"
    assert extract_summary(reply) == "tile rows in shared memory."
    assert extract_summary("Summary: fuse the epilogue") == "fuse the epilogue"
    assert extract_summary(f"```python\n# Idea: inside code\n{CODE}```") is None
    assert extract_summary(None) is None


def test_ideas_from_fenced_json_with_categories():
    reply = """Here are ideas:
```json
[{"idea": "Use float4 loads", "category": "memory"},
 {"idea": "Warp-shuffle reduction", "category": "compute"},
 {"idea": "use FLOAT4 loads!", "category": "dtypes"}]
```"""
    assert parse_ideas(reply, 5) == ["[memory] Use float4 loads", "[compute] Warp-shuffle reduction"]


def test_ideas_bare_json_strings_and_limit_k():
    reply = 'Sure! ["a first idea", "a second idea", "a third idea"] hope it helps'
    assert parse_ideas(reply, 2) == ["a first idea", "a second idea"]
    assert parse_ideas(reply, 0) == []


def test_ideas_json_object_wrapping_a_list():
    assert parse_ideas('{"ideas": [{"description": "unroll by 4"}]}', 3) == ["unroll by 4"]


def test_ideas_salvaged_from_broken_json():
    reply = '[{"idea": "double buffer with cp.async", "category": "async"}, {"idea": "tile 64\\"x64",'
    assert parse_ideas(reply, 3) == ["double buffer with cp.async", 'tile 64"x64']


def test_ideas_numbered_and_bulleted_fallback():
    reply = """Ideas:
1. **Shared memory tiling**: load 32x32 tiles
   so each element is read once.
2) Increase occupancy with 128 threads
- Vectorize with float4
* vectorize   with float4.
```python
# 3. not an idea
```
"""
    assert parse_ideas(reply, 10) == [
        "Shared memory tiling: load 32x32 tiles so each element is read once.",
        "Increase occupancy with 128 threads",
        "Vectorize with float4",
    ]


@pytest.mark.parametrize("reply", ["", None, 3.5, "nothing useful", "[1, 2, 3]", "[]", "{}",
                                   "```json\n[\n```", "- \n- ..", "[" * 5000])
def test_garbage_ideas_give_empty_list(reply):
    assert parse_ideas(reply, 3) == []


def test_negative_k_is_an_argument_error():
    with pytest.raises(ValueError):
        parse_ideas("[]", -1)
