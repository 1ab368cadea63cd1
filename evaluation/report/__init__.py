"""The report: tables, figures and statistics computed from sweep rows, and ``report.md``.

:mod:`.document` writes ``report.md``; :mod:`.tables`, :mod:`.figures` (and the flight
:mod:`.animation`), :mod:`.stats`, :mod:`.paired`, :mod:`.rl_seeds` and :mod:`.rl_stats` (RL
statistics over training seeds), :mod:`.information` (the information audit), :mod:`.beyond` (the
"beyond the source" section), :mod:`.recovery` (the recovery table and figure) and
:mod:`.correction` (a bounded correction's statistics) each compute one part. The report reads rows
(:mod:`residual_quad.evaluation.sweep`) and flies nothing except the animation's flights.
"""
