"""engine/unicode_data.c must be exactly what scripts/gen_unicode_data.py generates (the
tokenizer's category tables are generated, never hand-edited)."""
import os
import subprocess
import sys
import unicodedata

import pytest

SRC = os.environ.get("WEFT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_unicode_data_is_generated():
    path = os.path.join(SRC, "engine", "unicode_data.c")
    with open(path) as f:
        committed = f.read()
    if ('"%s"' % unicodedata.unidata_version) not in committed:
        pytest.skip("this Python has Unicode %s; the tables were generated from another version"
                    % unicodedata.unidata_version)
    out = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "gen_unicode_data.py")],
                         check=True, capture_output=True, text=True).stdout
    assert out == committed, "engine/unicode_data.c is stale: re-run scripts/gen_unicode_data.py"
