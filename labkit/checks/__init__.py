"""Exercise checkers, one module per lab; each prints a verdict (a pass, or a hint) and returns a bool.

>>> from labkit import checks
>>> checks.check_parameter_count(answer, model)
"""

from labkit.checks.batching import *  # noqa: F403  notebook 10
from labkit.checks.beyond import *  # noqa: F403  notebook 05
from labkit.checks.choice import *  # noqa: F403  notebook 12 (choosing a model)
from labkit.checks.compute import *  # noqa: F403  notebook 14
from labkit.checks.decoding import *  # noqa: F403  notebook 03
from labkit.checks.engines import *  # noqa: F403  notebook 12
from labkit.checks.fast import *  # noqa: F403  notebook 13
from labkit.checks.foundation import *  # noqa: F403  notebooks 00-01
from labkit.checks.generation import *  # noqa: F403  notebook 02
from labkit.checks.kvcache import *  # noqa: F403  notebook 06
from labkit.checks.longctx import *  # noqa: F403  notebook 15
from labkit.checks.parallel import *  # noqa: F403  notebook 16
from labkit.checks.prefill import *  # noqa: F403  notebook 07
from labkit.checks.quant import *  # noqa: F403  notebook 08
from labkit.checks.sampling import *  # noqa: F403  notebook 04
from labkit.checks.serving import *  # noqa: F403  notebook 11
from labkit.checks.setup import *  # noqa: F403  notebook 00
from labkit.checks.speculative import *  # noqa: F403  notebook 09
