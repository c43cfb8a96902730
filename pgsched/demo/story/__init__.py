"""`pgsched demo --story`: the scheduler's promises acted out, scene by scene, on a pretend clock.

Each scene runs in a scratch database of its own, cloned from one fresh install, and drives the
SQL functions with ``p_now`` as the database's owner, so every run prints the same text. The
scratch databases are dropped afterwards (also on an error, Ctrl-C or SIGTERM) unless kept.
"""

from __future__ import annotations

from pgsched.demo.story.runner import SCENES, Scene, Story, run_story
from pgsched.demo.story.stage import Check, SceneResult, Step

__all__ = ["SCENES", "Check", "Scene", "SceneResult", "Step", "Story", "run_story"]
