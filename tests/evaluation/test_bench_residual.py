"""``rquad bench --sections residual`` runs end to end (quick mode) and reports every row."""

from __future__ import annotations

import json


def test_bench_residual_section_quick(capsys):
    from residual_quad.cli import main

    assert main(["bench", "--sections", "residual", "--quick", "--json"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out[out.index("[") :])
    names = [r["name"] for r in rows]
    assert len(names) == 6 and all(r["section"] == "residual" for r in rows)
    assert any(n.startswith("training epoch") for n in names)
    assert all(r["median_us"] > 0 for r in rows)
