"""The model picker's Download… (D) and its empty state. The download runs `channel pull` as
a child against the local stand-in for the hub (tests/hub_server.py, through HF_ENDPOINT),
and the REAL engine then lists the file from the hub cache; the empty state is the fake
engine's, which finds no models."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from textual.widgets import Input, OptionList, Static

from channel_tui.app import ChannelApp
from channel_tui.options import AppOptions
from channel_tui.screens.model_picker import ModelPickerScreen
from engine.paths import MODEL_PLACES

from .hub_server import COMMIT, FakeHub
from .test_tui_app import on_screen, until
from .test_tui_settings import FAKE_ENGINE
from .tiny_model import write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent


def status(picker: ModelPickerScreen) -> str:
    return str(picker.query_one("#models-status", Static).content)


async def test_the_empty_picker_says_where_it_looked_and_how_to_get_one(tmp_path) -> None:
    app = ChannelApp(AppOptions(data_dir=tmp_path, engine_command=[sys.executable,
                                                                   str(FAKE_ENGINE)]))
    async with app.run_test(size=(130, 40)) as pilot:
        await until(pilot, lambda: len(app.chat.messages) == 3, what="the fake boot")
        await pilot.press("f5")
        await until(pilot, lambda: on_screen(app, ModelPickerScreen)
                    and "No GGUF" in status(app.screen), what="the empty list")
        said = status(app.screen)
        assert MODEL_PLACES in said and "Press D to download one here" in said
        assert "channel pull ORG/NAME[:QUANT]" in said


async def test_download_in_the_picker_lists_the_new_model(
        tmp_path: Path, tiny_gguf: Path, tiny_cache: Path, monkeypatch) -> None:
    hub = FakeHub()
    served = write_tiny_gguf(tmp_path / "served.gguf").read_bytes()
    hub.add("someone/tiny-GGUF", "tiny.Q8_0.gguf", served)
    hub.add("someone/tiny-GGUF", "tiny.Q4_0.gguf", served)
    for key in list(os.environ):
        if key.startswith(("HF_", "HUGGINGFACE_", "XDG_", "OLLAMA_", "CHANNEL_")):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    # The engine child and the pull child inherit these: one hub cache, the stand-in hub.
    for key, value in {"HOME": str(home), "HF_HOME": str(home / "hf"), "HF_ENDPOINT": hub.url,
                       "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(REPO)}.items():
        monkeypatch.setenv(key, value)
    app = ChannelApp(AppOptions(data_dir=tmp_path / "data", model=tiny_gguf,
                                cache_dir=tiny_cache, backend="numpy", debounce_s=60.0))
    try:
        async with app.run_test(size=(130, 40)) as pilot:
            await pilot.press("f5")
            await until(pilot, lambda: on_screen(app, ModelPickerScreen)
                        and app.screen.models, what="the model list")
            picker = app.screen
            box = picker.query_one("#models-download", Input)
            assert not box.display
            await pilot.press("d")
            assert box.display and box.has_focus
            await pilot.press(*"someone/tiny-GGUF")  # two GGUFs: the pull asks which
            await pilot.press("enter")
            await until(pilot, lambda: "Download failed" in status(picker), what="the error")
            assert "has 2 GGUF files; name one after a colon" in status(picker)
            box.value = "someone/tiny-GGUF:q8_0"
            await pilot.press("enter")
            snapshot = (home / "hf" / "hub" / "models--someone--tiny-GGUF" / "snapshots" /
                        COMMIT / "tiny.Q8_0.gguf")
            await until(pilot, lambda: str(snapshot) in [m["path"] for m in picker.models],
                        what="the downloaded model in the list")
            assert status(picker).startswith(f"Downloaded tiny-test-llama · F32 ({snapshot}).")
            options = picker.query_one(OptionList)
            assert picker.models[options.highlighted]["path"] == str(snapshot)
            assert snapshot.read_bytes() == served and not box.display
    finally:
        hub.close()
