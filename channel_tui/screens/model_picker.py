"""F5: the GGUF models on this machine; Enter starts a new session on the one chosen.

The list comes from the engine (`models` request, docs/protocol.md), so this process never
parses a GGUF. A model Channel cannot run is shown dimmed, with the reason, and cannot be
chosen. Choosing one asks for the new session's name (new_session.py); the session records
the model and always reopens on it (docs/models.md). D downloads one (REPO[:QUANT]) from
Hugging Face through `channel pull` (model_download.py), then asks for the list again.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from engine.paths import GET_A_MODEL, MODEL_PLACES

from .. import format as fmt
from ..link import EngineLink
from ..model_download import ModelDownload, PullOutcome
from ..sessions import list_sessions

WIDTHS = (40, 7, 6, 7, 9, 7)  # name, arch, params, quant, size, context


def count(n: int | None) -> str:
    """A parameter count as model cards say it: 135M, 1.5B."""
    if not n:
        return "?"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value >= 100 else f"{value:.3g}{unit}"
    return str(n)


def _fit(text: str, width: int) -> str:
    return text.ljust(width) if len(text) <= width else text[: width - 1] + "…"


def label(model: dict) -> str:
    """The Ollama name if the model has one, else its display name (as the CLI's table)."""
    aliases = model.get("aliases") or []
    return str(aliases[0] if aliases else model.get("name", "?"))


def model_prompt(model: dict) -> Text:
    """One row: name, architecture, parameters, quantization, size, context; then where it
    came from, or why it cannot run."""
    ctx = model.get("context_length")
    cells = (label(model), model.get("architecture") or "?", count(model.get("parameters")),
             model.get("quantization") or "?", fmt.size(model.get("file_size") or 0),
             f"{ctx:,}" if ctx else "?")
    row = " ".join(_fit(str(c), w) for c, w in zip(cells, WIDTHS))
    if model.get("supported"):
        return Text.assemble(row, "\n", (f"  {model.get('source')} · {model.get('path')}",
                                         "dim"))
    return Text.assemble((row, "dim"), "\n",
                         (f"  ✗ {model.get('problem')} · {model.get('path')}", "dim italic"))


class ModelPickerScreen(ModalScreen[dict | None]):
    CSS_PATH = "model_picker.tcss"
    BINDINGS = [Binding("escape", "dismiss_none", "Close"),
                Binding("d", "download", "Download…")]

    def __init__(self, engine: EngineLink) -> None:
        super().__init__()
        self.engine = engine
        self.models: list[dict] = []
        self.request_id: int | None = None
        self.download: ModelDownload | None = None  # the pull running, if one is
        self.downloaded: PullOutcome | None = None  # the last pull's outcome

    def compose(self) -> ComposeResult:
        with Vertical(id="models-box", classes="dialog") as box:
            box.border_title = "Models"
            header = " ".join(_fit(h, w) for h, w in zip(
                ("Name", "Arch", "Params", "Quant", "Size", "Context"), WIDTHS))
            yield Static(header, id="models-header", markup=False)
            yield OptionList(id="models-list")
            yield Static("Looking for models…", id="models-status", markup=False)
            yield Input(placeholder="ORG/NAME[:QUANT] from Hugging Face, e.g. "
                        "bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M", id="models-download")
            yield Static("Enter starts a new session on the model · D downloads one · "
                         "Esc closes", classes="dialog-hint")

    def on_mount(self) -> None:
        self.ask_for_models()

    def ask_for_models(self) -> None:
        self.engine.forget(self.request_id)
        request_id = self.engine.send("models", on_event=self._answered)
        if request_id is None:
            self._status("The engine is not running; wait for it to restart.")
        self.request_id = request_id

    def on_unmount(self) -> None:
        self.engine.forget(self.request_id)
        if self.download is not None:
            self.download.stop()

    def _answered(self, event: dict) -> None:
        if event.get("type") == "error":
            self._status(f"Could not list the models: {event.get('message')}")
        elif event.get("type") == "models":
            self.show(event.get("models") or [])

    def show(self, models: list[dict]) -> None:
        self.models = [m for m in models if isinstance(m, dict)]
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options([Option(model_prompt(m), id=str(i), disabled=not m.get("supported"))
                             for i, m in enumerate(self.models)])
        usable = sum(1 for m in self.models if m.get("supported"))
        said = f"{self.downloaded.summary} " if self.downloaded else ""
        if not self.models:
            self._status(f"{said}No GGUF models found in {MODEL_PLACES} (docs/models.md). "
                         f"Press D to download one here; {GET_A_MODEL}.")
        else:
            self._status(f"{said}{usable} of {len(self.models)} models can run here.")
        options.focus()
        new = (self.downloaded.record or {}).get("path") if self.downloaded else None
        paths = [m.get("path") for m in self.models]
        if new in paths:
            options.highlighted = paths.index(new)
        elif usable:
            options.highlighted = next(i for i, m in enumerate(self.models)
                                       if m.get("supported"))

    def _status(self, text: str) -> None:
        self.query_one("#models-status", Static).update(text)

    @on(OptionList.OptionSelected)
    def selected(self, event: OptionList.OptionSelected) -> None:
        model = self.models[int(event.option.id or 0)]
        if model.get("supported"):
            self.dismiss(model)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)

    def action_download(self) -> None:
        box = self.query_one("#models-download", Input)
        box.display = True
        box.focus()

    @on(Input.Submitted, "#models-download")
    def download_asked(self, event: Input.Submitted) -> None:
        spec = event.value.strip()
        if not spec or self.download is not None:
            return
        event.input.disabled = True
        self.download = ModelDownload(spec)
        self._status(f"Downloading {spec}…")
        self.run_worker(self._pull, thread=True, group="download", exit_on_error=False)

    def _pull(self) -> None:
        """In a worker thread: the pull to its end, its progress shown as it comes."""
        download = self.download
        assert download is not None
        outcome = download.run(lambda line: self.app.call_from_thread(self._status, line))
        self.app.call_from_thread(self._pulled, outcome)

    def _pulled(self, outcome: PullOutcome) -> None:
        self.download, self.downloaded = None, outcome
        box = self.query_one("#models-download", Input)
        box.disabled = False
        self._status(outcome.summary)
        if outcome.record is not None:
            box.value = ""
            box.display = False
            self.ask_for_models()  # the engine lists it from the hub cache
        else:
            box.focus()


def model_session_flow(chat) -> None:
    """Pick a model, then name a new session, then open it on that model."""
    data_dir = chat.engine.data_dir()
    from .new_session import NewSessionScreen

    def picked(model: dict | None) -> None:
        if not model:
            return

        async def named(name: str | None) -> None:
            if not name:
                return
            if name == chat.session or name in {s.name for s in list_sessions(data_dir)}:
                # An existing session stays on its own model (docs/models.md).
                chat.notify(f"Session {name!r} already exists and keeps its model; choose "
                            f"a new name.", severity="warning")
                return
            await chat.switch_session(name, model=str(model["path"]))

        chat.app.push_screen(NewSessionScreen(data_dir, ask_system_prompt=True,
                                              model=model.get("label") or model.get("name")),
                             named)

    chat.app.push_screen(ModelPickerScreen(chat.engine), picked)
