"""What only a persistent working state allows: undo, regenerate, edit and resend, stepping
through a message's replies, and fork (a mixin of ChatScreen).

Undo and regenerate ask the engine to roll its ring back (nothing is re-read); the engine
answers `undone` with the edited transcript, which the screen redraws, and a regenerate then
streams its new reply like any turn. Edit is undo with the message put back in the prompt.
Fork asks for a name, has the engine copy the session (or, from the turn list, F9, the
session as it was at the end of an earlier turn), and switches to the copy; a session
another Channel has open is refused, and a fork of it offered (session_busy.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .chat_answers import Answer, ends_with

if TYPE_CHECKING:
    from engine.process.events import EndOfTurn, Forked, Undone


class ChatEdits:
    def _can_edit(self, what: str) -> bool:
        if self.fatal or not self.session_open:
            self.note(f"Wait for the session to open, then {what}.", "warning")
            return False
        if self.busy:
            self.note(f"Wait for the reply to end (Esc stops it), then {what}.", "warning")
            return False
        if len(self.messages) < 2 or self.messages[-1].role != "assistant" or \
                self.messages[-2].role != "user":
            self.note(f"Nothing to {what}: the conversation does not end with a reply.",
                      "warning")
            return False
        return True

    def action_regenerate(self) -> None:
        if not self._can_edit("regenerate"):
            return
        if self.send("regenerate", self.regenerate_answer(), session=self.session,
                     **self.reply_fields()) is not None:
            self.note("Regenerating the last reply…")

    def regenerate_answer(self) -> Answer:
        """A turn's answer that also says, once the new reply ends, that it was sampled with
        a new seed (the engine draws one unless the settings fix it): Ctrl+G gives another
        answer, not the same one again."""
        previous: dict[str, int | None] = {"seed": None}

        async def undone(event: Undone) -> None:
            previous["seed"] = event.get("previous_seed")
            await self.handle_undone(event)

        async def ended(event: EndOfTurn) -> None:
            await self.handle_end_of_turn(event)
            self.notify(regenerated_text(event.get("seed"), previous["seed"]),
                        title="Regenerate")

        turn = self.turn_answer()
        return Answer({**turn.handlers, "undone": undone, "end_of_turn": ended}, turn.last)

    def action_other_reply(self, delta: int) -> None:
        """Alt+← / Alt+→: bring back another of the last message's replies (the engine takes
        its recorded tokens in again: nothing is sampled, nothing re-read)."""
        if not self._can_edit("step through its replies"):
            return
        origin = self.replies.step(delta)
        if origin is None:
            self.note("This message has one reply; Ctrl+G writes another." if
                      len(self.replies.origins) < 2 else "This is the first reply." if
                      delta < 0 else "This is the latest reply.", "warning")
            return
        if self.send("regenerate", self.turn_answer(), session=self.session,
                     reply=origin) is not None:
            self.note("Bringing back another reply…")

    def action_undo(self) -> None:
        if self._can_edit("undo") and self.send("undo", session=self.session) is not None:
            self.note("Undoing the last turn…")

    def action_edit_last(self) -> None:
        if not self._can_edit("edit"):
            return
        text = self.messages[-2].content

        async def edited(event: Undone) -> None:  # the message goes back to the prompt
            await self.handle_undone(event)
            self.prompt.load_text(text)
            self.prompt.move_cursor(self.prompt.document.end)
            self.prompt.focus()
            self.note("Edit your message; Enter sends it.")

        answer = Answer({"undone": edited}, ends_with("undone"))
        if self.send("undo", answer, session=self.session) is not None:
            self.note("Taking your last message back to edit it…")

    def action_fork(self) -> None:
        if self.fatal or not self.session_open:
            self.note("Wait for the session to open, then fork it.", "warning")
            return
        self.ask_fork_name()

    def ask_fork_name(self, turn: int | None = None) -> None:
        """Ask for the fork's name, then fork: the session as it is, or (`turn`, from the
        turn list, F9) continuing from the end of that turn. Esc forks nothing."""
        from .new_session import NewSessionScreen

        def fork_as(name: str | None) -> None:
            if not name:
                return
            fields: dict[str, object] = {} if turn is None else {"turn": turn}
            if self.send("fork", session=self.session, new=name, **fields) is not None \
                    and turn is not None:
                self.note(f"Forking from turn {turn} as {name!r}…")

        title = "Fork session" if turn is None else f"Fork from turn {turn}"
        self.app.push_screen(NewSessionScreen(self.data_dir(), title=title,
                                              suggestion_base=f"{self.session}-fork"),
                             fork_as)

    def session_busy(self, message: str) -> None:
        """Another Channel has this session open: offer its fork, or another session."""
        from .session_busy import session_busy_flow

        session_busy_flow(self, message)

    # -- their answers (called from ChatEvents' table) -------------------------------------
    async def handle_undone(self, event: Undone) -> None:
        await self._rebuild(event, trim=True)
        how = ("rolled back, nothing re-read" if event.get("method") == "rollback"
               else f"replayed: {event.get('reason')}")
        self.note(f"Took back {len(event.get('retracted') or [])} message(s) · {how}")

    async def handle_forked(self, event: Forked) -> None:
        # `forked` only ever answers this screen's fork: nothing else writes to this engine
        # (`channel fork` copies the files without it), so it needs no answer of its own.
        new = event.get("new")
        how = ("; it reads the conversation again under the new system prompt"
               if event.get("system_changed") else "")
        turn = event.get("turn")
        source = repr(self.session) + ("" if turn is None else f" from turn {turn}")
        self.notify(f"Forked {source} as {new!r} "
                    f"({event.get('events', 0)} events); switching to the fork{how}",
                    title="Fork")
        await self.switch_session(new)


def regenerated_text(seed: int | None, previous: int | None) -> str:
    """What Ctrl+G did, in words: 'Regenerated with a new seed, 42 (was 7)'."""
    if seed is None:
        return "Regenerated greedily (temperature 0): the same reply comes back"
    if previous is None:
        return f"Regenerated with seed {seed}"
    if seed == previous:  # a seed fixed in the settings
        return f"Regenerated with the same seed, {seed} (fixed in the settings)"
    return f"Regenerated with a new seed, {seed} (was {previous})"
