"""Studies: experiments that fly sweeps (or their own models) and write their own reports.

:mod:`.pipeline` (``rquad pipeline``: collect → train → evaluate → report), :mod:`.stress`,
:mod:`.ablation` (+ :mod:`.ablation_report`), :mod:`.reproduce` (the committed rows re-flown and
judged), :mod:`.engine_period` and the stick robots of :mod:`.stick`. A study may import the sweep
engine and the report, never a bench.
"""
