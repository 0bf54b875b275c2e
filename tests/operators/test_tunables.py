import pytest

from evokernel.operators.tunables import find_tunables, set_tunables

SRC = """constexpr int BLOCK = 256;          // tune: 64 128 256 512 1024
#define ROWS 4   // tune: 1, 2,4
  const float ALPHA = 2.0f; // tune: 1.0f 2.0f
int untouched = 3; // just a comment
"""


def test_find_and_set():
    ts = find_tunables(SRC)
    assert [(t.name, t.value, t.choices, t.line) for t in ts] == [
        ("BLOCK", "256", ("64", "128", "256", "512", "1024"), 1),
        ("ROWS", "4", ("1", "2", "4"), 2),
        ("ALPHA", "2.0f", ("1.0f", "2.0f"), 3)]
    out = set_tunables(SRC, {"BLOCK": "1024", "ALPHA": "1.0f"})
    assert "constexpr int BLOCK = 1024;" in out and "const float ALPHA = 1.0f;" in out
    assert "#define ROWS 4" in out and "int untouched = 3;" in out
    assert find_tunables(out)[0].choices == ts[0].choices      # the marker survives


def test_unknown_name_is_an_error():
    with pytest.raises(ValueError, match="untouched"):
        set_tunables(SRC, {"untouched": "4"})
