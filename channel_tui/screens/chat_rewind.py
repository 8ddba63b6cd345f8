"""F9: go back to an earlier turn (rewind) or fork from it (a mixin of ChatScreen).

The flow: the turn list (TurnsScreen, made from the transcript the screen holds), then the
engine's dry run (`rewind` with `dry_run`: `rewind_plan`), then the confirmation
(RewindScreen) showing the plan's text; Rewind sends `rewind`, Fork from here asks for a
name as Ctrl+F does and sends `fork` with `turn`. Esc at any step changes nothing, while
the engine plans too (its plan is then not shown).

A key pressed at the wrong moment (a reply being written, the session still opening, a
rewind already under way) gets one line saying so and loses nothing: the draft stays in the
prompt, a queued message stays queued. The same checks run again at each step, since a
reply can begin while a dialog is open (another program's message, say).

While the rewind itself is in flight a message typed is queued (chat.py) and sent once the
`rewound` transcript is shown: sent before, its reply would be drawn into a transcript the
rebuild then replaces. Whether a rewind is in flight is read from the answers pending, so it
is forgotten with them (an engine restart, a session switch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import format as fmt
from .chat_answers import Answer, ends_with
from .turns import FORK, REWIND, RewindScreen, Turn, TurnsScreen, turns_of

if TYPE_CHECKING:
    from engine.process.events import Error, RewindPlanned, Rewound

PLANNING, REWINDING = "rewind_plan", "rewound"  # the event that ends each request


class ChatRewind:
    def rewind_in_flight(self) -> str | None:
        """PLANNING or REWINDING while such a request of ours is unanswered, else None."""
        for answer in self.answers.values():
            if REWINDING in answer.handlers:
                return REWINDING
            if PLANNING in answer.handlers:
                return PLANNING
        return None

    def cancel_rewind_plan(self) -> bool:
        """Esc while the engine plans a rewind: its plan, when it comes, is not shown (a dry
        run changed nothing). False when no plan is awaited."""
        planning = [req for req, answer in self.answers.items()
                    if PLANNING in answer.handlers]
        for req in planning:
            del self.answers[req]
        if planning:
            self.note("Rewind cancelled; nothing changed.")
        return bool(planning)

    def _can_rewind(self) -> bool:
        """Whether a rewind may be asked now; else one line says why (nothing is lost)."""
        if self.fatal or not self.session_open:
            self.note("Wait for the session to open, then rewind (F9).", "warning")
        elif self.busy:
            self.note("A reply is being written: wait for it to end (Esc stops it), then "
                      "rewind (F9).", "warning")
        elif (step := self.rewind_in_flight()) is not None:
            self.note("A rewind is under way; wait for it to finish." if step == REWINDING
                      else "Already asking the engine what a rewind would do…", "warning")
        else:
            return True
        return False

    def action_turns(self) -> None:
        if not self._can_rewind():
            return
        turns = turns_of(self.messages)
        if len(turns) < 2:
            self.note("Nothing to go back to: the conversation has no turns yet.", "warning")
            return

        def chosen(number: int | None) -> None:
            if number is not None and self._can_rewind():
                self._plan_rewind(turns[number], len(turns) - 1)

        self.app.push_screen(TurnsScreen(turns), chosen)

    def _plan_rewind(self, turn: Turn, now: int) -> None:
        answer = Answer({PLANNING: lambda event: self._planned(turn, event),
                         "error": self._rewind_plan_failed}, ends_with(PLANNING))
        if self.send("rewind", answer, session=self.session, turn=turn.number,
                     dry_run=True) is not None:
            self.note(f"Asking the engine how to go back to turn {turn.number} of {now}…")

    async def _planned(self, turn: Turn, event: RewindPlanned) -> None:
        if not self._can_rewind():  # a reply began while the engine planned: ask again later
            return
        self.note("")

        def decided(choice: str | None) -> None:
            if choice == REWIND and self._can_rewind():
                self._rewind(turn)
            elif choice == FORK:
                self.ask_fork_name(turn.number)

        self.app.push_screen(RewindScreen(turn, event.get("text", ""),
                                          len(event.get("retracted") or [])), decided)

    async def _rewind_plan_failed(self, event: Error) -> None:
        self.note(f"Cannot rewind: {event.get('message', 'unknown error')}", "error")

    def _rewind(self, turn: Turn) -> None:
        answer = Answer({REWINDING: self.handle_rewound, "error": self._rewind_failed},
                        ends_with(REWINDING))
        if self.send("rewind", answer, session=self.session, turn=turn.number) is not None:
            self.note(f"Going back to turn {turn.number}…")

    async def _rewind_failed(self, event: Error) -> None:
        self.note(f"Rewind failed: {event.get('message', 'unknown error')}", "error")
        await self.send_queued()

    # -- the answer (also in ChatEvents' table) -----------------------------------------------
    async def handle_rewound(self, event: Rewound) -> None:
        await self._rebuild(event, trim=True)
        self.note(rewound_text(event))
        await self.send_queued()


def rewound_text(event: Rewound) -> str:
    """'Back to turn 3 (warm, 12 ms)', and how many messages were taken back."""
    taken = len(event.get("retracted") or [])
    return (f"Back to turn {event.get('turn')} ({event.get('method', '?')}, "
            f"{fmt.ms(event.get('ms'))}) · took back {taken} message(s)")
