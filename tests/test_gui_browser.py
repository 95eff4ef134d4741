"""The GUI in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

``contactopt gui acrobot`` runs in a subprocess; the page changes a cost weight (the planner's
weight changes and the cost plot follows), refuses a malformed value with a message, pushes a
body (the state jumps) with the button and by dragging the handle's arrow with the mouse in the
3-D view, moves the goal generated from the cost, survives a reconnect, shows the
same run to two browsers, and renders a non-blank screenshot.  A second test measures the scene
update rate for the humanoid with a browser connected and saves the README screenshot.  Without ``/usr/bin/chromium`` both tests
are skipped with the reason.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.realtime]


def _need_browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"browser test skipped: {CHROMIUM} is missing (install Debian's chromium package)")
    pytest.importorskip("playwright.sync_api", reason="browser test skipped: playwright is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``contactopt gui ...`` in a subprocess; ``state()`` reads its JSON route."""

    def __init__(self, *args, tmp_path):
        port = _free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "contactopt", "gui", *args, "--port", str(port),
                                      "--out-dir", str(tmp_path), "--seconds", "600"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        self.url = None
        end = time.monotonic() + 120
        lines = []
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"at (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        if self.url is None:
            self.close()
            raise AssertionError("contactopt gui printed no URL:\n" + "".join(lines))

    def state(self) -> dict:
        with urllib.request.urlopen(self.url.rstrip("/") + "/contactopt/state.json", timeout=10) as r:
            return json.load(r)

    def wait(self, cond, timeout=30.0, what="condition"):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s = self.state()
            if cond(s):
                return s
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; last state: {json.dumps(s)[:2000]}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _browser(p):
    return p.chromium.launch(executable_path=CHROMIUM, args=ARGS)


def _field(page, label: str):
    """The input next to the label ``label`` in viser's panel."""
    return page.locator(f"xpath=//label[normalize-space()='{label}']/following::input[1]").first


def _pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=float)


def _open(page, url):
    page.goto(url)
    page.get_by_text(re.compile(r"t = [0-9.]+ s")).first.wait_for(timeout=60000)


def _quat_matrix(wxyz) -> np.ndarray:
    w, x, y, z = np.asarray(wxyz, dtype=float) / np.linalg.norm(wxyz)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def _drag_push_handle(page, server, tmp_path):
    """Press on the drag handle's x arrow (projected through the page's own camera, reported in
    state.json), drag along it and release: the page sends the drag, the server pushes the
    selected body (logged, the state jumps) and the handle snaps back."""
    s = server.wait(lambda s: s["cameras"] and s["push_handle"], what="the page's camera")
    cam = s["cameras"][0]
    box = page.locator("canvas").first.bounding_box()
    R, t = _quat_matrix(cam["wxyz"]), np.array(cam["position"])
    f = 0.5 * box["height"] / np.tan(0.5 * cam["fov"])

    def pixel(p):  # world point → page pixel (OpenCV camera axes: +z forward, +y down)
        c = R.T @ (np.asarray(p, dtype=float) - t)
        return box["x"] + 0.5 * box["width"] + f * c[0] / c[2], box["y"] + 0.5 * box["height"] + f * c[1] / c[2]

    origin, scale = np.array(s["push_handle"]), s["handle_scale"]
    grab = pixel(origin + [0.7 * scale, 0.0, 0.0])
    end = pixel(origin + [0.7 * scale + 0.3, 0.0, 0.0])
    q0 = np.array(s["qvel"])
    since = max((c["wall"] for c in s["changes"]), default=-np.inf)

    def pushed(s):
        return (any(c["wall"] > since and c["what"].startswith("push ") and "impulse=" in c["what"]
                    for c in s["changes"]) and np.abs(np.array(s["qvel"]) - q0).max() > 1e-3)

    # up to three drags: headless Chromium once dropped one (CI, 29 Nov); each must still be a
    # real drag of the handle that the server turns into a logged push
    for attempt in range(3):
        page.mouse.move(*grab)
        page.mouse.down()
        for a in np.linspace(0.1, 1.0, 10):
            page.mouse.move(grab[0] + a * (end[0] - grab[0]), grab[1] + a * (end[1] - grab[1]))
            page.wait_for_timeout(30)
        page.mouse.up()
        try:
            s5 = server.wait(pushed, timeout=10.0 if attempt < 2 else 30.0, what="the drag's push")
            break
        except AssertionError as exc:
            # keep what the page showed and where the mouse went, for the dropped drag's cause
            shot = tmp_path / f"dropped-drag-{attempt}.png"
            page.screenshot(path=str(shot))
            seen = server.state()
            detail = (f"drag {attempt + 1} of 3 gave no push: mouse {grab} -> {end} on canvas "
                      f"{box}, "
                      f"handle {seen['push_handle']} (was {origin.tolist()}), camera "
                      f"{seen['cameras'][:1]} (was {cam}), screenshot {shot}")
            if attempt == 2:
                raise AssertionError(f"{exc}; {detail}") from None
            warnings.warn(detail, stacklevel=1)  # shown in the run's summary even if a retry passes
    assert s5["status"]["paused"]
    np.testing.assert_allclose(s5["push_handle"], origin, atol=0.05)  # snapped back to the body


def test_browser_drives_the_run(tmp_path):
    _need_browser()
    from playwright.sync_api import sync_playwright

    server = Server("acrobot", "--seed", "1", tmp_path=tmp_path)
    try:
        with sync_playwright() as p:
            browser = _browser(p)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            _open(page, server.url)
            page.get_by_role("button", name="Reset (same seed)").click()
            server.wait(lambda s: s["changes"] and s["changes"][-1]["what"] == "reset seed=1", what="the reset")
            server.wait(lambda s: 0.3 < s["time"], what="the plant to run")

            # pause, so that the state and the cost change only through the page
            page.get_by_role("button", name="Pause", exact=True).click()
            s0 = server.wait(lambda s: s["status"]["paused"], what="pause")
            t_paused = s0["time"]

            page.get_by_role("tab", name="Settings").click()
            key = "weight.qvel"
            w0 = s0["values"][key]
            field = _field(page, key)
            field.fill("abc")
            field.press("Enter")
            page.get_by_text(re.compile(r"⚠.*weight\.qvel")).first.wait_for(timeout=10000)
            s1 = server.state()
            assert s1["values"][key] == w0  # the malformed value never reached the solver

            before = server.wait(lambda s: s["plot"].get("cost." + key, 0) > 0, what="a cost sample")
            field = _field(page, key)
            field.fill(str(w0 * 100))
            field.press("Enter")
            s2 = server.wait(lambda s: s["planner_weights"].get(key) == pytest.approx(w0 * 100),
                             what="the planner's weight to change")
            assert s2["values"][key] == pytest.approx(w0 * 100)
            want = 100 * before["plot"]["cost." + key]
            s3 = server.wait(lambda s: s["plot_revision"] > before["plot_revision"]
                             and abs(s["plot"]["cost." + key] - want) <= 1e-6 * want,
                             what="the cost plot to follow the weight")
            assert s3["time"] == t_paused
            assert any(c["what"] == f"set {key} = {w0 * 100:g}" or c["what"].startswith(f"set {key} = ")
                       for c in s3["changes"])

            # negative weight: clamped to 0 and said so
            field = _field(page, key)
            field.fill("-1")
            field.press("Enter")
            server.wait(lambda s: s["values"][key] == 0.0, what="the clamp")
            page.get_by_text(re.compile(r"clamped")).first.wait_for(timeout=10000)

            # push: the state jumps while paused
            page.get_by_role("tab", name="Run").click()
            q0 = np.array(server.state()["qvel"])
            page.get_by_role("button", name="Push", exact=True).click()
            s4 = server.wait(lambda s: np.abs(np.array(s["qvel"]) - q0).max() > 1e-2, what="the push")
            assert s4["time"] == t_paused and s4["status"]["paused"]

            # drag the push handle's x arrow in the 3-D view with the mouse: on release, an impulse
            _drag_push_handle(page, server, tmp_path)

            # a goal generated from the cost (the tip's SitePosition): typed into its field, it
            # reaches the planner (logged) and its marker; a malformed one is refused
            gkey = "target.site[tip]"
            gf = _field(page, gkey)
            gf.fill("0.3, 0, 3.9")
            gf.press("Enter")
            server.wait(lambda s: s["goals"][gkey] == [0.3, 0.0, 3.9]
                        and any(c["what"].startswith(f"goal {gkey}") for c in s["changes"]), what="the goal")
            gf = _field(page, gkey)
            gf.fill("0.3, nope")
            gf.press("Enter")
            page.get_by_text(re.compile(r"⚠.*expected 3 numbers")).first.wait_for(timeout=10000)
            assert server.state()["goals"][gkey] == [0.3, 0.0, 3.9]

            # a second browser sees the same run; a reconnecting one sees the current state
            other = browser.new_page(viewport={"width": 1000, "height": 700})
            _open(other, server.url)
            other.get_by_text(f"t = {t_paused:.2f} s").first.wait_for(timeout=20000)
            assert server.wait(lambda s: s["clients"] >= 2, what="two clients")["clients"] >= 2
            other.close()
            page.reload()
            page.get_by_text(f"t = {t_paused:.2f} s").first.wait_for(timeout=30000)
            page.get_by_role("tab", name="Settings").click()
            assert _field(page, key).input_value() == "0"

            page.get_by_role("tab", name="Run").click()
            page.get_by_role("button", name="Resume", exact=True).click()
            server.wait(lambda s: s["time"] > t_paused + 0.2, what="resume")
            page.wait_for_timeout(1000)
            img = _pixels(page.screenshot())
            assert img.std() > 10.0, f"screenshot looks blank (pixel std {img.std():.1f})"
            scene = img[:, : int(img.shape[1] * 0.7)]
            assert scene.std() > 3.0, f"3-D view looks blank (pixel std {scene.std():.1f})"
            browser.close()
    finally:
        server.close()


def test_humanoid_scene_rate_and_screenshot(tmp_path):
    _need_browser()
    from playwright.sync_api import sync_playwright

    server = Server("humanoid-getup", "--slowdown", "2", "--pause-at", "0.6", tmp_path=tmp_path)
    try:
        with sync_playwright() as p:
            browser = _browser(p)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            _open(page, server.url)
            # the README screenshot: getting up, planned torso path drawn
            close = page.locator("xpath=//*[contains(text(),'Software WebGL')]/ancestor::div[.//button][1]//button")
            if close.count():
                close.first.click()  # the browser's notice about software rendering
            server.wait(lambda s: s["status"]["paused"], timeout=90, what="--pause-at")
            page.get_by_text("ghost at horizon end").click()
            page.wait_for_timeout(1500)
            shot = page.screenshot()
            assert _pixels(shot).std() > 10.0
            out = os.environ.get("CONTACTOPT_GUI_SCREENSHOT")
            if out:
                Path(out).write_bytes(shot)
            page.get_by_role("button", name="Resume", exact=True).click()
            time.sleep(3.0)
            rates = []
            for _ in range(5):
                time.sleep(1.0)
                s = server.state()
                if not s["status"]["paused"]:
                    rates.append(s["scene_rate_hz"])
            rate = float(np.median(rates))
            print(f"humanoid scene updates/s with a browser connected: {rate:.1f}; "
                  f"planner update ms (median): {s['update_ms_median']}")
            assert s["clients"] >= 1
            assert rate >= 30.0, f"scene update rate {rate:.1f}/s < 30/s"
            browser.close()
    finally:
        server.close()
