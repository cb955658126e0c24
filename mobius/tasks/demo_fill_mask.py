"""demo-fill-mask: fill-mask's graphs under another pipeline tag (a throwaway task showing
that a task is its file and its test; docs/adding_an_ep.md's closing note cites it)."""

from __future__ import annotations

import dataclasses

from mobius.tasks import fill_mask

TASK = dataclasses.replace(fill_mask.TASK, name="demo-fill-mask",
                           summary="fill-mask under another tag (a demonstration)")
