"""Pilot test of the model picker (F3) against the REAL engine subprocess, on a fake HOME:
the list comes from the engine's `models` request, unsupported models are dimmed, disabled
and say why, and choosing one starts a new session that runs on it."""

from __future__ import annotations

import os
from pathlib import Path

from textual.widgets import Input, OptionList

from channel_tui.app import ChannelApp
from channel_tui.options import AppOptions
from channel_tui.screens.chat import ChatScreen
from channel_tui.screens.model_picker import ModelPickerScreen
from channel_tui.screens.new_session import NewSessionScreen
from channel_tui.widgets.status_bar import StatusBar

from .model_homes import make_fake_home
from .test_tui_app import on_screen, until


async def test_picker_lists_models_and_starts_a_session_on_one(
        tmp_path: Path, tiny_gguf: Path, tiny_cache: Path, monkeypatch) -> None:
    fake = make_fake_home(tmp_path / "fake")
    for key in list(os.environ):
        if key.startswith(("HF_", "HUGGINGFACE_", "XDG_", "OLLAMA_", "CHANNEL_")):
            monkeypatch.delenv(key)
    for key, value in {**fake.env, "HOME": str(fake.home)}.items():
        monkeypatch.setenv(key, value)  # the engine child inherits them
    app = ChannelApp(AppOptions(data_dir=tmp_path / "data", model=tiny_gguf,
                                cache_dir=tiny_cache, backend="numpy", max_tokens=8,
                                debounce_s=60.0))
    seen: list[dict] = []
    handle = ChatScreen.handle_event

    async def spy(event: dict) -> None:
        seen.append(event)
        await handle(app.chat, event)

    app.chat.handle_event = spy  # type: ignore[method-assign]
    booted = lambda: [e for e in seen if e.get("type") == "booted"]  # noqa: E731
    async with app.run_test(size=(130, 40)) as pilot:
        await until(pilot, booted, what="the first boot")
        assert "Models" in [c.title for c in app.get_system_commands(app.screen)]
        await pilot.press("f5")
        await until(pilot, lambda: on_screen(app, ModelPickerScreen)
                    and app.screen.models, what="the model list")
        picker = app.screen
        options = picker.query_one(OptionList)
        paths = [m["path"] for m in picker.models]
        assert str(fake.paths["ollama"]) in paths and str(fake.paths["gemma"]) in paths
        for i, model in enumerate(picker.models):
            option = options.get_option_at_index(i)
            assert option.disabled is (not model["supported"])
            if not model["supported"]:
                assert model["problem"] in str(option.prompt)
        gemma = paths.index(str(fake.paths["gemma"]))
        assert "architecture 'gemma2' is not supported" in str(
            options.get_option_at_index(gemma).prompt)
        options.highlighted = paths.index(str(fake.paths["ollama"]))
        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, NewSessionScreen),
                    what="the name dialog")
        app.screen.query_one(Input).value = "picked"
        await pilot.press("enter")
        await until(pilot, lambda: any(e.get("session") == "picked" for e in booted()),
                    what="the new session's boot")
        [event] = [e for e in booted() if e.get("session") == "picked"]
        assert event["model_path"] == str(fake.paths["ollama"].resolve())
        assert app.chat.session == "picked"
        await pilot.pause(0.1)
        assert app.chat.query_one(StatusBar).model == event["model"]
        # An existing session's name is refused: it keeps the model it was made with.
        await pilot.press("f5")
        await until(pilot, lambda: on_screen(app, ModelPickerScreen)
                    and app.screen.models, what="the model list again")
        options = app.screen.query_one(OptionList)
        options.highlighted = paths.index(str(fake.paths["lmstudio"]))
        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, NewSessionScreen),
                    what="the name dialog")
        app.screen.query_one(Input).value = "default"
        await pilot.press("enter")
        await until(pilot, lambda: any("keeps its model" in str(n.message)
                                       for n in app._notifications), what="the refusal")
        assert app.chat.session == "picked" and len(booted()) == 2
    record = (tmp_path / "data" / "picked.model.json").read_text()
    assert str(fake.paths["ollama"].resolve()) in record
