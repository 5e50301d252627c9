"""Solvers and LP backends by name, each defined once.

Import-light (no numpy, no PuLP): ``cosample plan`` and ``cosample testbed run`` offer these
names in ``--help``, ``planner.solvers`` dispatches on them and ``planner.lp`` builds the backend.
"""

EXACT, REDUCED, FULL, NONCOLLAB = "exact", "reduced", "full", "noncollab"

#: Solvers a plan can be made with (``--solver``), the default first.
SOLVERS = (EXACT, REDUCED, FULL)
#: The paper's linear programmes, solved by an LP backend.
LP_SOLVERS = (REDUCED, FULL)
#: Every name ``solve`` accepts: the solvers and the non-collaborative baseline (``--noncollab``).
ALL_SOLVERS = (*SOLVERS, NONCOLLAB)
DEFAULT_SOLVER = EXACT

#: LP backends: name -> (PuLP solver class, how to install it).
LP_BACKENDS = {
    "glpk": ("GLPK_CMD", "install the Debian package glpk-utils (glpsol)"),
    "highs": ("HiGHS", "pip install highspy"),
    "cbc": ("COIN_CMD", "install the Debian package coinor-cbc (cbc)"),
}
DEFAULT_LP_BACKEND = "highs"
