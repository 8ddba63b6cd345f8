"""The replies the last message has had: Ctrl+G keeps the one it replaces (the engine's
stream holds it, retracted), and Alt+← / Alt+→ step back and forth through them.

A reply brought back is a new event naming the reply it restores (`restores`), so replies
are counted by what they are, not by how often they were shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ReplyChoices:
    message_id: str | None = None  # the message these replies answer
    origins: list[str] = field(default_factory=list)  # each distinct reply, oldest first
    shown: int | None = None  # the one the conversation has now

    @classmethod
    def from_transcript(cls, transcript: list[dict]) -> ReplyChoices:
        """From a `booted` or `undone` transcript (hidden entries included)."""
        user = next((m for m in reversed(transcript)
                     if m.get("role") == "user" and not m.get("hidden")), None)
        if user is None:
            return cls()
        choices = cls(user.get("id"))
        for entry in transcript:
            if entry.get("role") != "assistant" or entry.get("in_reply_to") != user.get("id") \
                    or entry.get("withdraws") or entry.get("stop") == "retracted":
                continue
            at = choices.add(entry.get("restores") or entry.get("id"))
            if not entry.get("hidden"):
                choices.shown = at
        return choices

    def add(self, origin: str | None) -> int | None:
        """Count reply `origin` (if new); its place in the list."""
        if origin is None:
            return None
        if origin not in self.origins:
            self.origins.append(origin)
        return self.origins.index(origin)

    def answered(self, message_id: str | None, origin: str | None) -> None:
        """A reply ended: to this message (a regenerate, or one brought back), or to a new
        one, whose replies start over."""
        if message_id is not None and message_id != self.message_id:
            self.message_id, self.origins, self.shown = message_id, [], None
        self.shown = self.add(origin)

    def step(self, delta: int) -> str | None:
        """The reply `delta` places from the one shown, or None past either end."""
        if self.shown is None or not 0 <= self.shown + delta < len(self.origins):
            return None
        return self.origins[self.shown + delta]

    def label(self) -> str:
        """'reply 2 of 3 · Alt+←/→', or '' for a message with one reply."""
        if self.shown is None or len(self.origins) < 2:
            return ""
        return f"reply {self.shown + 1} of {len(self.origins)} · Alt+←/→"
