"""docs/benchmarks.md's figures are generated from the benchmarks' saved JSON, never typed: each block
between `<!-- chaos: FILE -->` and `<!-- /chaos -->` is what `bench/chaos.py --render FILE` prints."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- chaos: (\S+) -->\n(.*?)<!-- /chaos -->", re.S)


def _chaos():
    spec = importlib.util.spec_from_file_location("bench_chaos", ROOT / "bench" / "chaos.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_chaos_block_is_its_saved_run_rendered():
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    blocks = BLOCK.findall(doc)
    assert blocks, "docs/benchmarks.md has no chaos block"
    render = _chaos().render
    for source, text in blocks:
        saved = json.loads((ROOT / source).read_text())
        assert text == render(saved, source), f"{source}: regenerate with bench/chaos.py --render {source}"
