"""``rquad bench``: micro-benchmarks that print medians and ratios measured side by side.

:mod:`.sections` names the sections and runs them, :mod:`.timing` holds the row, the median timer
and the table; every other module is one section (``remote``: the simulation server beside the
in-process env). This room may import every other one; nothing outside it imports a bench.
"""
