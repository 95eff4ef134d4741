"""Drop the bundled humanoid, record it, and write a video and a plot.

Run:  python examples/simulate_and_render.py [OUTPUT_DIR]
"""

import sys
from pathlib import Path

import contactopt
from contactopt.plots import plot_simulation
from contactopt.render import OffscreenRenderer, VideoWriter
from contactopt.simulate import frame_stride


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    model = contactopt.load_model("humanoid")
    fps = 30.0
    true_fps = 1.0 / (frame_stride(model.opt.timestep, fps) * model.opt.timestep)
    with VideoWriter(out_dir / "humanoid.mp4", fps=true_fps) as video, \
            OffscreenRenderer(model, 640, 480) as renderer:
        result = contactopt.simulate(
            model, 3.0, frame_callback=lambda data: video.append(renderer.render(data)), frame_rate=fps)
    plot_simulation(result, out_dir / "humanoid.png")
    s = result.summary()
    print(f"root height {result.qpos[0, 2]:.2f} m -> {result.qpos[-1, 2]:.2f} m; "
          f"{s['contacts_final']} contacts at the end; wrote {video.frames} frames to {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "out"))
