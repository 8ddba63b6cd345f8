"""How the chat screen takes the answers to its own requests (a mixin of ChatScreen).

An event caused by a request carries the request's id (`req`). A request sent with an
`Answer` has its events of the answer's types taken by the answer's handlers instead of the
screen's table (chat_events.py): what is particular to that request, such as an open or a
turn that failed, or the save the user asked for. Every other event, the rest of that
request's included, goes through the table: what an event of that type means for the screen,
whoever caused it (another program's message, another screen's request, a boot after a
restart).

The answers are kept here, keyed by the id `EngineLink.send` returns, rather than given to
the engine client as `on_event` callbacks: those run in the client's reader, ahead of this
screen's queue. This screen takes every event in its own queue, in the engine's order and in
order with the user's keys, through `handle_event`, and once: the app forwards it every
event, those answering other screens' requests too (a boot comparison's save updates the
status bar).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.process.protocol import SESSION_BUSY

from .. import format as fmt

if TYPE_CHECKING:
    from engine.process.events import Error, Event

    # Each handler takes its own event's TypedDict (engine/process/events.py).
    EventHandler = Callable[[Any], Awaitable[None]]


def _never(event: Event) -> bool:
    return False


@dataclass(frozen=True)
class Answer:
    """What is particular to the events answering one request.

    `handlers` take the request's events of their types instead of the table. The request is
    over, and its answer forgotten, after an `error` or the first event `last` accepts.
    """

    handlers: Mapping[str, EventHandler]
    last: Callable[[Event], bool] = _never


def ends_with(kind: str) -> Callable[[Event], bool]:
    """`last` for a request whose answer ends with an event of type `kind`."""
    return lambda event: event.get("type") == kind


def settled(event: Event) -> bool:
    """`last` for a save: a snapshot that is no longer being written."""
    return event.get("type") == "snapshot" and event.get("status") != "saving"


class ChatAnswers:
    answers: dict[int, Answer]  # request id -> its answer; set by ChatScreen

    def take_answer(self, event: Event) -> Answer | None:
        """The answer that takes `event`, if it answers one of our requests; forgotten once
        the request is over. A fatal error stops the engine whatever it answers: the table
        takes it."""
        req = event.get("req")
        if not isinstance(req, int) or event.get("fatal"):
            return None
        answer = self.answers.get(req)
        if answer is not None and (event.get("type") == "error" or answer.last(event)):
            del self.answers[req]
        return answer

    # -- open: any error means the session cannot be used ------------------------------------
    def open_answer(self) -> Answer:
        # Kept while the session is open: a message it left unanswered is answered after
        # `booted`, under this request's id (a failure there is shown as this open's too).
        return Answer({"error": self._open_failed})

    async def _open_failed(self, event: Error) -> None:
        message = event.get("message", "unknown error")
        if event.get("code") == SESSION_BUSY:  # another Channel has it: offer a way on
            self.session_busy(message)
            return
        await self.show_fatal(f"Could not open session {self.session!r}: {message}")

    # -- turn and regenerate: an error ends the reply in flight ------------------------------
    def turn_answer(self) -> Answer:
        return Answer({"error": self._turn_failed}, ends_with("end_of_turn"))

    async def _turn_failed(self, event: Error) -> None:
        if self.current is None:  # a regenerate refused before its reply began
            await self.handle_error(event)
            return
        message = event.get("message", "unknown error")
        await self._finish_current("failed", message)
        self.note(f"The turn failed: {message}", "error")

    # -- save: the user asked, so say how it went ---------------------------------------------
    def save_answer(self) -> Answer:
        return Answer({"snapshot": self._saved, "error": self._save_failed}, settled)

    async def _saved(self, event: Event) -> None:
        await self.handle_snapshot(event)
        status = event.get("status")
        if status == "saved":
            text = f"Snapshot saved · {fmt.size(event.get('bytes'))} in {fmt.ms(event.get('ms'))}"
        elif status == "exists":
            text = "Snapshot unchanged · nothing new since the last save"
        else:
            text = f"Snapshot {fmt.snapshot_text(event, None)}"
        self.notify(text, title="Save", severity="error" if status == "failed"
                    else "information")

    async def _save_failed(self, event: Error) -> None:
        message = event.get("message", "unknown error")
        self.status_bar.snapshot = {"status": "failed", "error": message}
        self.notify(f"Save failed: {message}", severity="error")

    # -- restore ------------------------------------------------------------------------------
    def restore_answer(self) -> Answer:
        return Answer({"error": self._restore_failed}, ends_with("restored"))

    async def _restore_failed(self, event: Error) -> None:
        self.banner.show(f"Restore failed: {event.get('message', 'unknown error')}",
                         kind="error")
