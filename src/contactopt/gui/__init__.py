"""The browser GUI of ``contactopt gui`` (viser): a live plant and planner, tuned while they run.

:class:`~contactopt.gui.app.GuiApp` draws and drives a :class:`~contactopt.mpc.live.LiveRun`;
the command is :func:`~contactopt.gui.cli.cmd_gui`.  Importing this package does not import
viser (it is imported when a server starts).
"""

__all__ = ["GuiApp"]


def __getattr__(name):
    if name == "GuiApp":
        from .app import GuiApp

        return GuiApp
    raise AttributeError(name)
