"""The bundled model library: MJCF files written for this project, one per seed system.

Each XML file opens with a comment saying what it models and where its dimensions
come from.  :data:`BUNDLED_MODELS` maps the public name (what ``load_model`` and the
CLI accept) to the file and a one-line description.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["BundledModel", "BUNDLED_MODELS", "MODEL_DIR", "bundled_model_path"]

MODEL_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class BundledModel:
    """A model shipped with contactopt.

    Attributes:
      name: public name, e.g. ``"humanoid"``.
      filename: MJCF file inside :data:`MODEL_DIR`.
      description: one line for ``contactopt models``.
      source: which seed paper (and section) the system comes from.
      scene_of: for an extra scene of another model (e.g. hills), that model's name.
    """

    name: str
    filename: str
    description: str
    source: str
    scene_of: str | None = None

    @property
    def path(self) -> Path:
        """Absolute path of the MJCF file."""
        return MODEL_DIR / self.filename


_MODELS = [
    BundledModel("ball", "ball.xml", "1 kg, 0.1 m ball dropped onto a plane; xyz force motors",
                 "convex contact model paper, Fig. 3"),
    BundledModel("humanoid", "humanoid.xml", "22-DoF humanoid, 1.6 m, 55 kg, 16 hinge motors",
                 "iLQG MPC paper"),
    BundledModel("acrobot", "acrobot.xml", "classic acrobot: two 1 m, 1 kg links, actuated elbow",
                 "iLQG MPC paper"),
    BundledModel("swimmer", "swimmer.xml", "planar 4-link swimmer in water (ellipsoid fluid model)",
                 "iLQG MPC paper"),
    BundledModel("hopper", "hopper.xml", "planar one-legged hopper: x, z, pitch, hip, knee",
                 "iLQG MPC paper"),
    BundledModel("hopper-foot", "hopper_foot.xml",
                 "planar hopper with a heel-and-toe foot: x, z, pitch, hip, ankle; 1.3 kg",
                 "IDTO paper Table III (the authors' hopper example)"),
    BundledModel("spinner", "spinner.xml", "2-link planar finger turning a damped 0.25 m sphere",
                 "IDTO paper VI-A1"),
    BundledModel("quadruped", "quadruped.xml", "Mini-Cheetah-like quadruped, 9 kg, 12 motors, flat ground",
                 "IDTO paper VI-A2"),
    BundledModel("quadruped-hills", "quadruped_hills.xml",
                 "the quadruped with 1 m-diameter cylinder hills ahead", "IDTO paper VI-A2",
                 scene_of="quadruped"),
    BundledModel("hand", "hand.xml", "Allegro-like 16-DoF hand, palm up, and a free 50 g, 6 cm ball",
                 "IDTO paper VI-A3"),
    BundledModel("bimanual", "bimanual.xml", "two iiwa-like 7-DoF arms, table and a free 550 g, 15 cm cube",
                 "IDTO paper VI-A4"),
]

BUNDLED_MODELS: dict[str, BundledModel] = {m.name: m for m in _MODELS}


def bundled_model_path(name: str) -> Path:
    """Path of the bundled model ``name`` (``KeyError`` if it is not bundled)."""
    return BUNDLED_MODELS[name].path
