"""Child processes that never outlive the harness process that started them.

``medr2 eval`` runs ``medr2 prepare`` in a child process, and rehearsals start ``medr2 serve`` children. When the
parent is killed (Slurm's time limit, ``scancel``, a SIGKILL), an orphaned child would keep its GPU memory and its
port. :func:`die_with_parent` (a ``preexec_fn``) asks Linux to send the child SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``); elsewhere it does nothing and the parent's own cleanup is all there is.
"""

from __future__ import annotations

import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
