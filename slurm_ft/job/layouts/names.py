"""What a checkpoint's name says: the step it carries, and whether it looks like a checkpoint at all."""
from __future__ import annotations

import re
from typing import Optional

_STEPISH = re.compile(r"(?:step|iter|global_step|checkpoint|ckpt|epoch)[-_=]?(\d{1,18})|\A(\d{1,18})\Z")


def step_of(name: str) -> Optional[int]:
    """The step a checkpoint's name carries (step_000123, iter_0000123, checkpoint-123, epoch=1-step=300)."""
    m = re.search(r"step[_=-]?(\d{1,18})", name) or re.search(r"(\d{1,18})", name)
    return int(m.group(1)) if m else None


def looks_like_checkpoint(name: str) -> bool:
    """A directory named like a checkpoint (step_7, iter_0000007, global_step7, checkpoint-7, 7): without
    any layout's evidence inside, it is an unfinished (or foreign) write, not something to ignore."""
    return bool(_STEPISH.search(name))
