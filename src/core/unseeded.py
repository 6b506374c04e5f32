"""Randomness that must differ between processes: the operating system's, never the global `random`.

Every training seeds the global `random` (Lightning's `seed_everything`), so two processes that trained
with the same seed draw the same "random" numbers after it: two test workers each started a server on
port 26311, the first port `free_port` drew after `random.seed(0)`, and one test talked to the other's
server. Ports and back-off jitter come from here.
"""

from __future__ import annotations

import random

UNSEEDED = random.SystemRandom()  # os.urandom underneath: no state to seed, none shared by a fork
