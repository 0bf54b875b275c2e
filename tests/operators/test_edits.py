"""SEARCH/REPLACE edits (operators.parsing): application, the whole-file fallback, and every way
a block fails, each named with the block and the reason."""
from __future__ import annotations

import pytest

from evokernel.operators.parsing import (apply_edits, code_from_reply, has_edits, parse_edits)

PARENT = """import torch.nn as nn
CUDA = r'''
constexpr int BLOCK = 256;  // tune: 128 256 512
__global__ void k(float* y) {
    y[threadIdx.x] = 0.f;
}
__global__ void k2(float* y) {
    y[threadIdx.x] = 0.f;
}
'''
class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


def block(search: str, replace: str, marks: tuple[str, str, str] = ("<" * 7, "=" * 7, ">" * 7)
          ) -> str:
    s, d, e = marks
    return f"{s} SEARCH\n{search}{d}\n{replace}{e} REPLACE\n"


def test_blocks_apply_in_order_inside_or_outside_fences():
    reply = ("Idea: bigger blocks, then a loop\n```cpp\n"
             + block("constexpr int BLOCK = 256;  // tune: 128 256 512\n",
                     "constexpr int BLOCK = 512;  // tune: 128 256 512 1024\n") + "```\n"
             + block("constexpr int BLOCK = 512;  // tune: 128 256 512 1024\n",
                     "constexpr int BLOCK = 512;  // tune: 256 512 1024\n"
                     "constexpr int UNROLL = 4;   // tune: 1 2 4\n"))
    out = apply_edits(reply, PARENT)
    assert out.failure == "" and out.blocks == 2
    assert out.source == PARENT.replace(
        "constexpr int BLOCK = 256;  // tune: 128 256 512\n",
        "constexpr int BLOCK = 512;  // tune: 256 512 1024\n"
        "constexpr int UNROLL = 4;   // tune: 1 2 4\n")


def test_trailing_whitespace_is_forgiven_and_a_block_may_delete_lines():
    reply = block("class ModelNew(nn.Module):   \n    def forward(self, x):\n",
                  "class ModelNew(nn.Module):\n    def forward(self, x):  # same\n")
    assert apply_edits(reply, PARENT).source == PARENT.replace("(self, x):\n",
                                                               "(self, x):  # same\n")
    deleted = apply_edits(block("import torch.nn as nn\n", ""), PARENT)
    assert deleted.source == PARENT.split("\n", 1)[1]
    marks = ("<<<<<", "=====", ">>>>>")                 # 5 to 9 marker characters
    assert apply_edits(block("import torch.nn as nn\n", "", marks), PARENT).source == deleted.source


def test_no_match_names_the_block_and_its_first_line():
    reply = block("import torch\n", "import torch.nn as nn\n") + \
        block("constexpr int BLOCK = 128;\n", "constexpr int BLOCK = 64;\n")
    out = apply_edits(reply, PARENT)
    assert out.source is None and out.blocks == 2
    assert out.failure.startswith("block 1 of 2 (reply line 1, SEARCH starting 'import torch')")
    assert "is not in the current kernel" in out.failure
    second = apply_edits(block("import torch.nn as nn\n", "import torch.nn as nn\n") +
                         block("constexpr int BLOCK = 128;\n", "x\n"), PARENT)
    assert second.failure.startswith("block 2 of 2 (reply line 6") and "not in" in second.failure


def test_a_block_may_not_match_what_an_earlier_block_removed():
    reply = block("import torch.nn as nn\n", "import torch.nn as tnn\n") + \
        block("import torch.nn as nn\n", "import torch\n")
    out = apply_edits(reply, PARENT)
    assert out.source is None and out.failure.startswith("block 2 of 2")
    assert "(after the blocks before it)" in out.failure


def test_several_matches_are_refused_with_their_lines():
    out = apply_edits(block("    y[threadIdx.x] = 0.f;\n", "    y[threadIdx.x] = 1.f;\n"), PARENT)
    assert out.source is None
    assert "matches 2 places (lines 5, 8); it must match exactly one" in out.failure


S, D, E = "<<<<<<< SEARCH\n", "=======\n", ">>>>>>> REPLACE\n"


@pytest.mark.parametrize("reply, words", [
    (S + "import torch.nn as nn\n" + E, "block 1 (reply line 1): no '=======' line"),
    (S + "import torch.nn as nn\n" + D + "import torch\n",
     "block 1 (reply line 1): no '>>>>>>> REPLACE' line"),
    (S + "\n" + D + "import torch\n" + E, "its SEARCH section is empty"),
    ("intro\n" + D + "import torch\n" + E,
     "a '>>>>>>> REPLACE' line (reply line 4) without its '<<<<<<< SEARCH'"),
    (S + "a\n" + S + "b\n" + D + "c\n" + E, "block 1 (reply line 1): no '=======' line"),
    (S + "a\n" + D + "b\n" + S, "block 1 (reply line 1): no '>>>>>>> REPLACE' line"),
])
def test_malformed_blocks_are_named(reply, words):
    out = apply_edits(reply, PARENT)
    assert out.source is None and words in out.failure, out.failure


def test_a_good_block_before_a_malformed_one_is_not_applied_alone():
    reply = block("import torch.nn as nn\n", "import torch\n") + "<<<<<<< SEARCH\nx\n"
    blocks, malformed = parse_edits(reply)
    assert len(blocks) == 1 and malformed.startswith("block 2 (reply line 6)")
    assert apply_edits(reply, PARENT).source is None


def test_code_from_reply_prefers_edits_and_falls_back_to_the_whole_module():
    whole = f"Idea: rewrite\n```python\n{PARENT.replace('256', '512')}```\n"
    assert code_from_reply(whole, PARENT) == (PARENT.replace("256", "512"), "")
    assert code_from_reply(whole) == (PARENT.replace("256", "512"), "")
    edits = "```python\n" + block("class ModelNew(nn.Module):\n",
                                   "class ModelNew(nn.Module):  # e\n") + "```\n"
    code, failure = code_from_reply(edits, PARENT)
    assert failure == "" and "class ModelNew(nn.Module):  # e\n" in code
    bad = block("no such line\n", "x\n")
    assert code_from_reply(bad, PARENT) == (None, apply_edits(bad, PARENT).failure)
    assert code_from_reply(bad) == (None, "")          # no base: edits are not code
    assert code_from_reply("no code at all", PARENT) == (None, "")
    assert not has_edits(None) and not has_edits(whole) and has_edits(bad)
